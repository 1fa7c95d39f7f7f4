package middleware_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/middleware"
	"github.com/conveyorq/conveyor/worker"
)

// TestRateLimitBudget, without a pool: a key gets Limit starts, the next
// job is postponed (not run, not failed) to when the oldest start leaves
// the window; another key and another Name have budgets of their own; a
// job without a key is not limited; the log holds at most Limit entries
// and expires within one Period.
func TestRateLimitBudget(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	var (
		mu        sync.Mutex
		decisions []middleware.RateDecision
	)
	cfg := &middleware.RateLimitConfig{
		Limit: 5, Period: time.Second, Key: middleware.FromHeader("user"), Prefix: prefix,
		OnDecision: func(_ *conveyor.Job, d middleware.RateDecision) {
			mu.Lock()
			defer mu.Unlock()
			decisions = append(decisions, d)
		},
	}
	limit, err := middleware.RateLimit(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	daily := *cfg
	daily.Name, daily.Period = "daily", 24*time.Hour
	limitDaily, err := middleware.RateLimit(rdb, &daily)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { ran++; return nil })
	ctx := context.Background()
	run := func(mw conveyor.Middleware, s *fakeSettler, id, user string) *conveyor.Job {
		t.Helper()
		var headers map[string]string
		if user != "" {
			headers = map[string]string{"user": user}
		}
		job := newJob(s, id, "k", headers)
		if err := mw(h).ProcessJob(ctx, job); err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		return job
	}

	s := &fakeSettler{}
	for i := range 5 {
		run(limit, s, "a"+strconv.Itoa(i), "alice")
	}
	if ran != 5 || len(s.postpones) != 0 {
		t.Fatalf("first 5 of alice: ran %d, postponed %d; want 5, 0", ran, len(s.postpones))
	}
	over := run(limit, s, "a5", "alice")
	if ran != 5 || len(s.postpones) != 1 || !over.Settled() || len(s.retries) != 0 || len(s.discards) != 0 {
		t.Fatalf("6th of alice: ran %d, postponed %d, retried %d, settled %v; want it postponed only",
			ran, len(s.postpones), len(s.retries), over.Settled())
	}
	first := decisions[0].At
	if at := s.postpones[0]; at.Before(first.Add(time.Second)) || at.After(first.Add(time.Second+200*time.Millisecond)) {
		t.Fatalf("postponed to %v, want within [first start %v + 1s, + 200ms jitter]", at, first)
	}
	if last := decisions[len(decisions)-1]; last.Allowed || !last.At.Equal(s.postpones[0]) || last.Key != "alice" {
		t.Fatalf("refusal decision %+v, want not allowed, At = the postponed time, key alice", last)
	}

	for i := range 5 {
		run(limit, s, "b"+strconv.Itoa(i), "bob")
	}
	if ran != 10 || len(s.postpones) != 1 {
		t.Fatalf("bob shares alice's budget: ran %d, postponed %d; want 10, 1", ran, len(s.postpones))
	}
	run(limitDaily, s, "d0", "alice")
	if ran != 11 || len(s.postpones) != 1 {
		t.Fatalf("a named limiter shares the unnamed one's budget: ran %d, postponed %d", ran, len(s.postpones))
	}
	for i := range 10 {
		run(limit, s, "n"+strconv.Itoa(i), "")
	}
	if ran != 21 || len(s.postpones) != 1 {
		t.Fatalf("jobs without a key were limited: ran %d, postponed %d", ran, len(s.postpones))
	}

	key := middleware.RateLimitRedisKey(prefix, "", "alice")
	if n := rdb.ZCard(ctx, key).Val(); n != 5 {
		t.Fatalf("%s holds %d entries, want 5 (refusals write nothing)", key, n)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Second {
		t.Fatalf("%s TTL %v, want within (0, 1s]", key, ttl)
	}
	if ttl := rdb.PTTL(ctx, middleware.RateLimitRedisKey(prefix, "daily", "alice")).Val(); ttl <= time.Hour || ttl > 24*time.Hour {
		t.Fatalf("daily key TTL %v, want about 24h", ttl)
	}
}

// TestRateLimitPool: 20 jobs of one key and 5 of another through a pool
// with a 5 per second limit. By the server's clock no 1 s window holds more
// than 5 starts of a key; all 25 run, each once, with Retries 0 (a job over
// the limit is postponed, not retried); the second key never waits for the
// first key's budget.
func TestRateLimitPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		allowed = map[string][]time.Time{}
		refused = map[string]int{}
		runs    = map[string]int{}
		done    = make(chan struct{})
	)
	limit, err := middleware.RateLimit(e.rdb, &middleware.RateLimitConfig{
		Limit: 5, Period: time.Second, Key: middleware.FromHeader("user"), Prefix: e.prefix,
		OnDecision: func(_ *conveyor.Job, d middleware.RateDecision) {
			mu.Lock()
			defer mu.Unlock()
			if d.Allowed {
				allowed[d.Key] = append(allowed[d.Key], d.At)
			} else {
				refused[d.Key]++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := conveyor.HandlerFunc(func(_ context.Context, job *conveyor.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if job.Retries != 0 {
			t.Errorf("job %s ran with Retries %d, want 0: a rate-limited job is postponed, not retried", job.ID, job.Retries)
		}
		runs[job.ID]++
		if len(runs) == 25 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	})
	var reqs []conveyor.Request
	for i := range 25 {
		user := "alice"
		if i%5 == 4 { // bob's jobs come among alice's
			user = "bob"
		}
		reqs = append(reqs, conveyor.Request{Kind: "call", Opts: &conveyor.EnqueueOptions{
			ID: user + "-" + strconv.Itoa(i), Headers: map[string]string{"user": user},
		}})
	}
	if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
		t.Fatal(err)
	}
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 10, Middleware: []conveyor.Middleware{limit}})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	stop := drivertest.Background(t, p.Run)
	waitFor(t, "all 25 jobs to run", 30*time.Second, done)
	stop()
	took := time.Since(began)

	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("job %s ran %d times, want 1", id, n)
		}
	}
	if len(allowed["alice"]) != 20 || len(allowed["bob"]) != 5 {
		t.Fatalf("admissions: alice %d, bob %d; want 20, 5 (one per run)", len(allowed["alice"]), len(allowed["bob"]))
	}
	for user, ts := range allowed {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		// Any 6 consecutive starts span at least a second: no 1 s window
		// holds 6.
		for i := 0; i+5 < len(ts); i++ {
			if gap := ts[i+5].Sub(ts[i]); gap < time.Second {
				t.Errorf("%s: starts %d and %d are %v apart: 6 starts within one second", user, i, i+5, gap)
			}
		}
	}
	if refused["alice"] < 15 {
		t.Errorf("alice was refused %d times; 20 jobs over a 5/s limit must be refused at least 15 times", refused["alice"])
	}
	if refused["bob"] != 0 {
		t.Errorf("bob was refused %d times: his 5 jobs fit his own budget", refused["bob"])
	}
	if span := allowed["alice"][19].Sub(allowed["alice"][0]); span < 3*time.Second {
		t.Errorf("alice's 20 starts span %v, want at least 3s at 5/s", span)
	}
	t.Logf("25 jobs in %v; alice refused %d times; alice's starts span %v",
		took.Round(time.Millisecond), refused["alice"], allowed["alice"][19].Sub(allowed["alice"][0]).Round(time.Millisecond))
	if ks := leftKeys(t, e, ":rl:"); len(ks) != 0 {
		t.Errorf("queue keys left after every job ran: %v", ks)
	}
}

// leftKeys lists the keys under the test's prefix except those whose name
// contains one of skip (the middleware's own keys, which expire by TTL).
func leftKeys(t *testing.T, e env, skip ...string) []string {
	t.Helper()
	var out []string
next:
	for _, k := range redistest.Keys(t, e.rdb, e.prefix) {
		for _, s := range skip {
			if strings.Contains(k, s) {
				continue next
			}
		}
		out = append(out, k)
	}
	return out
}

func TestRateLimitConfig(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, cfg := range []*middleware.RateLimitConfig{
		nil, {}, {Limit: -1}, {Limit: 1, Period: time.Microsecond}, {Limit: 1, Prefix: "a{b}"}, {Limit: 1, Name: "x}"},
	} {
		if _, err := middleware.RateLimit(rdb, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if _, err := middleware.RateLimit(nil, &middleware.RateLimitConfig{Limit: 1}); err == nil {
		t.Error("nil client accepted")
	}
}
