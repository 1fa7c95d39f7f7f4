package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis keeps a pool reaper per shared client (redistest.Client).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

// testConfig runs the demo at test pace: a 1s payment window (order 1001
// is paid after 24 orders are created: under a full make test on 2 cores
// that took over 300ms, and its timer won), 50ms between runs of a failed
// job.
func testConfig(prefix string) config {
	return config{Window: time.Second, RetryDelay: 50 * time.Millisecond, MaxAttempts: 3, RaceOrders: 20, Prefix: prefix}
}

// checkDemo runs the demo end to end and checks its story: the payment wins
// order 1001's race and the timer order 1002's and 1003's (1003's late
// payment is refused); 1002's stock service fails once and the retry
// returns the stock; 1004's job runs out of runs, is listed in the discard
// queue, and runs again once re-driven; every photo-finish order has one
// winner; the stock adds up.
func checkDemo(t *testing.T, rdb redis.UniversalClient, prefix string) string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, rdb, slog.New(slog.DiscardHandler), &out, testConfig(prefix)); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	got := out.String()
	// Each line must be there, and in this order: each is caused by the one
	// before it.
	for _, story := range [][]string{
		{
			"order 1001 created (unpaid); payment timer order:1001:timeout fires in 1s",
			"order 1001: payment arrived: the payment won the race; timer cancelled before it fired: true",
			"final: order 1001 is paid",
		},
		{
			"order 1002: payment timer fired: the timeout won the race; order cancelled",
			"order 1002: attempt 1 of 3 failed: stock service: request timed out; retried in 50ms",
			"order 1002: stock returned (attempt 2 of 3)",
			"final: order 1002 is cancelled",
		},
		{
			"order 1003: payment timer fired: the timeout won the race; order cancelled",
			"order 1003: payment arrived, but the timeout won the race: the order is cancelled; payment refused",
			"final: order 1003 is cancelled",
		},
		{
			"order 1004: payment timer fired: the timeout won the race; order cancelled",
			"order 1004: attempt 1 of 3 failed: stock service: warehouse unreachable; retried in 50ms",
			"order 1004: attempt 2 of 3 failed: stock service: warehouse unreachable; retried in 50ms",
			"order 1004: attempt 3 of 3 failed: stock service: warehouse unreachable; no attempts left",
			"order 1004: job order:1004:timeout discarded after attempt 3: stock service: warehouse unreachable",
			`discard queue of "orders" (conveyor.Inspector): 1 job(s)`,
			`  order:1004:timeout  kind=order.timeout  attempt=3  reason="stock service: warehouse unreachable"`,
			"order 1004: the stock service is repaired; re-driving order:1004:timeout with Inspector.Redrive",
			"order 1004: stock returned (attempt 1 of 3)",
			"final: order 1004 is cancelled",
		},
	} {
		at := 0
		for _, line := range story {
			i := strings.Index(got[at:], line+"\n")
			if i < 0 {
				t.Errorf("output lacks %q after offset %d:\n%s", line, at, got)
				break
			}
			at += i + len(line)
		}
	}
	for _, never := range []string{"order 1001: payment timer fired", "order 1002: attempt 2 of 3 failed", "stock was already returned", "order 2001"} {
		if strings.Contains(got, never) {
			t.Errorf("output has %q:\n%s", never, got)
		}
	}

	// The photo finish's split varies with timing; its sum and the stock
	// may not.
	m := regexp.MustCompile(`photo finish: 20 orders paid within 100ms either side of their deadline: the payment won (\d+) \((\d+) timers cancelled in time, (\d+) fired and found the order paid\), the timeout won (\d+)\n`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no photo-finish line:\n%s", got)
	}
	paidRace, cancelledTimers, beatenTimers, timedOut := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3]), atoi(t, m[4])
	if paidRace+timedOut != 20 || cancelledTimers+beatenTimers != paidRace {
		t.Errorf("photo finish: paid %d + timed out %d, cancelled %d + beaten %d: %s", paidRace, timedOut, cancelledTimers, beatenTimers, m[0])
	}
	t.Logf("photo finish: payment won %d (timer cancelled %d, fired late %d), timeout won %d", paidRace, cancelledTimers, beatenTimers, timedOut)
	wantShelf := "final: tea on the shelf: " + strconv.Itoa(100-1-paidRace) + " (100, less " + strconv.Itoa(1+paidRace) + " paid orders)\n"
	if !strings.Contains(got, wantShelf) {
		t.Errorf("output lacks %q:\n%s", wantShelf, got)
	}
	for _, want := range []string{
		"final: queue \"orders\": ready=0 in_flight=0 delayed=0 discarded=0",
		"final: every order has exactly one winner and the stock adds up\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	return got
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDemoOnRealRedis(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	checkDemo(t, rdb, prefix)
	if keys := redistest.AllKeys(t, rdb, prefix); len(keys) != 0 {
		t.Fatalf("demo left keys behind: %v", keys)
	}
}

// On the embedded Redis (what `go run` falls back to) with the demo's own
// key prefix; the test can also see that the demo leaves no key at all.
func TestDemoOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	checkDemo(t, rdb, "")
	if keys := mr.Keys(); len(keys) != 0 {
		t.Fatalf("demo left keys behind: %v", keys)
	}
}

// The compare-and-set behind the race: many payments and timeouts at once
// on one order, and exactly one of them moves it.
func TestTransitionHasOneWinner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newShop(redistest.Client(t), redistest.Prefix(t))
	for round := range 20 {
		id := strconv.Itoa(round)
		if err := s.createOrder(ctx, id, item); err != nil {
			t.Fatal(err)
		}
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			winner []string
		)
		for i := range 16 {
			to := paid
			if i%2 == 1 {
				to = cancelled
			}
			wg.Go(func() {
				won, state, err := s.transition(ctx, id, unpaid, to)
				if err != nil {
					t.Error(err)
					return
				}
				if state != paid && state != cancelled {
					t.Errorf("order %s: state %q after a transition", id, state)
				}
				if won {
					mu.Lock()
					winner = append(winner, to)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		o, err := s.order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(winner) != 1 || o["state"] != winner[0] {
			t.Fatalf("order %s: winners %v, state %q; want one winner whose state stuck", id, winner, o["state"])
		}
	}
}

// Returning a cancelled order's stock is safe to repeat, even at once: the
// unit goes back once. An order that is not cancelled gives nothing back.
func TestGiveBackOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newShop(redistest.Client(t), redistest.Prefix(t))
	if err := s.setStock(ctx, item, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.createOrder(ctx, "1", item); err != nil {
		t.Fatal(err)
	}
	if _, err := s.giveBack(ctx, "1"); err == nil || !strings.Contains(err.Error(), errNotCancelled.Error()) {
		t.Fatalf("giveBack of an unpaid order = %v, want %v", err, errNotCancelled)
	}
	if moved, _, err := s.transition(ctx, "1", unpaid, cancelled); err != nil || !moved {
		t.Fatalf("cancel: moved %v, %v", moved, err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		returned int
	)
	for range 16 {
		wg.Go(func() {
			ok, err := s.giveBack(ctx, "1")
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				returned++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n, err := s.stockOf(ctx, item); err != nil || n != 10 || returned != 1 {
		t.Fatalf("stock %d (%v), %d calls returned the unit; want 10 and 1", n, err, returned)
	}
}

// TestDemoKeepsKeys: with Keep the demo leaves its queue in Redis, for
// the dashboard and the CLI to show, and a second run starts afresh.
func TestDemoKeepsKeys(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for run1 := range 2 {
		var out bytes.Buffer
		cfg := testConfig(prefix)
		cfg.Keep = true
		if err := run(ctx, rdb, slog.New(slog.DiscardHandler), &out, cfg); err != nil {
			t.Fatalf("run %d: %v\noutput:\n%s", run1+1, err, out.String())
		}
		if !strings.Contains(out.String(), "go run ./cmd/conveyor dash --no-auth --prefix "+prefix) {
			t.Errorf("run %d does not say how to see its queues:\n%s", run1+1, out.String())
		}
		queues, err := rdb.SMembers(ctx, prefix+":queues").Result()
		if err != nil || len(queues) != 1 || queues[0] != queue {
			t.Fatalf("after run %d the registry lists %q (%v), want the demo's queue %q", run1+1, queues, err, queue)
		}
	}
}
