package list_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestStaleTokenAfterReapIsLeaseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	c := e.open("q", time.Minute)
	stale := fetch(t, c, 1)[0]

	e.expireLeases("q")
	n, err := e.d.Reap(ctx, "q")
	if err != nil || n != 1 {
		t.Fatalf("reap: %d, %v; want 1 requeued", n, err)
	}
	// Every settle with the reclaimed delivery fails, whether or not the
	// message was delivered again since.
	if err := c.Ack(ctx, stale); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("ack of a reclaimed delivery: %v, want ErrLeaseLost", err)
	}
	fresh := fetch(t, c, 1)[0]
	if fresh.ID != "a" || fresh.Recoveries != 1 || fresh.Attempt != 0 || fresh.Token == stale.Token {
		t.Fatalf("redelivery: id %s recoveries %d attempt %d token %s (stale %s)",
			fresh.ID, fresh.Recoveries, fresh.Attempt, fresh.Token, stale.Token)
	}
	checks := map[string]error{
		"ack":     c.Ack(ctx, stale),
		"retry":   c.Retry(ctx, stale, time.Time{}),
		"release": c.Release(ctx, stale),
		"discard": c.Discard(ctx, stale, "x"),
		"extend":  c.Extend(ctx, time.Minute, stale),
	}
	for op, err := range checks {
		if !errors.Is(err, broker.ErrLeaseLost) {
			t.Errorf("%s with a stale token: %v, want ErrLeaseLost", op, err)
		}
		var de *broker.DeliveryError
		if !errors.As(err, &de) || de.Delivery != stale {
			t.Errorf("%s: error %v does not name the delivery", op, err)
		}
	}
	if t.Failed() {
		return
	}
	// The stale calls changed nothing: the fresh delivery still settles.
	if err := c.Ack(ctx, fresh); err != nil {
		t.Fatalf("ack of the current delivery: %v", err)
	}
	if ks := redistest.Keys(t, e.c, e.prefix); len(ks) != 0 {
		t.Fatalf("keys left: %v", ks)
	}
}

func TestConcurrentReapersMoveEachJobOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &list.Config{ReapBatch: 7}) // many small steps interleave
	ctx := context.Background()
	const n = 200
	var msgs []*broker.Message
	for _, id := range seq("j", n) {
		msgs = append(msgs, msg("q", id))
	}
	e.enqueue(msgs...)
	c := e.open("q", time.Minute)
	fetchN(t, c, n)
	e.expireLeases("q")

	const reapers = 4
	counts := make([]int, reapers)
	errs := make([]error, reapers)
	var wg sync.WaitGroup
	for i := range reapers {
		wg.Go(func() { counts[i], errs[i] = e.d.Reap(ctx, "q") })
	}
	wg.Wait()
	total := 0
	for i := range reapers {
		if errs[i] != nil {
			t.Fatalf("reaper %d: %v", i, errs[i])
		}
		total += counts[i]
	}
	if total != n {
		t.Fatalf("reapers requeued %d in all (%v), want %d", total, counts, n)
	}
	if got := e.llen("q", "ready"); got != n {
		t.Fatalf("ready holds %d, want %d", got, n)
	}
	again := fetchN(t, c, n)
	got := ids(again)
	slices.Sort(got)
	if !slices.Equal(got, seq("j", n)) {
		t.Fatalf("redelivered ids differ: %v", got)
	}
	for _, d := range again {
		if d.Recoveries != 1 {
			t.Fatalf("%s: recoveries %d, want 1", d.ID, d.Recoveries)
		}
	}
}

func TestSweepRequeuesInFlightWithoutLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"))
	c := e.open("q", time.Minute)
	ds := fetchN(t, c, 2)
	// As if eviction or a failover lost a's lease but not its in-flight entry.
	if err := e.c.ZRem(ctx, e.key("q", "lease"), "a").Err(); err != nil {
		t.Fatal(err)
	}
	n, err := e.d.Reap(ctx, "q")
	if err != nil || n != 1 {
		t.Fatalf("reap: %d, %v; want 1", n, err)
	}
	again := fetch(t, c, 10)
	if len(again) != 1 || again[0].ID != "a" || again[0].Recoveries != 1 {
		t.Fatalf("after the sweep fetched %v, want a with one recovery", ids(again))
	}
	if err := c.Ack(ctx, ds[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("ack of the swept delivery: %v, want ErrLeaseLost", err)
	}
	if err := c.Ack(ctx, ds[1], again[0]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if n, err := e.d.Reap(ctx, "q"); err != nil || n != 0 {
		t.Fatalf("second reap: %d, %v; want 0", n, err)
	}
}

func TestConsumerSweepsOnItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	// A consumer that died holding a; its lease was then lost.
	dead := e.open("q", time.Minute)
	fetch(t, dead, 1)
	if err := e.c.ZRem(ctx, e.key("q", "lease"), "a").Err(); err != nil {
		t.Fatal(err)
	}
	// A new consumer's first Fetch sweeps, without anyone calling Reap.
	c := e.open("q", time.Minute)
	ds := fetch(t, c, 1)
	if ds[0].ID != "a" || ds[0].Recoveries != 1 {
		t.Fatalf("fetched %s with %d recoveries, want a with 1", ds[0].ID, ds[0].Recoveries)
	}
}

func TestExtendRestoresAMissingLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	c := e.open("q", time.Minute)
	d := fetch(t, c, 1)[0]
	old := d.LeaseDeadline
	if err := e.c.ZRem(ctx, e.key("q", "lease"), "a").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, 10*time.Minute, d); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if !d.LeaseDeadline.After(old.Add(8 * time.Minute)) {
		t.Fatalf("lease deadline %v not moved ~10min past %v", d.LeaseDeadline, old)
	}
	score, err := e.c.ZScore(ctx, e.key("q", "lease"), "a").Result()
	if err != nil || int64(score) != d.LeaseDeadline.UnixMilli() {
		t.Fatalf("lease score %v (%v), want %d", score, err, d.LeaseDeadline.UnixMilli())
	}
	if n, err := e.d.Reap(ctx, "q"); err != nil || n != 0 {
		t.Fatalf("reap after extend: %d, %v; want 0", n, err)
	}
}

func TestDuplicateLiveIDIsNotLeasedTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	c := e.open("q", time.Minute)
	first := fetch(t, c, 1)[0]
	e.enqueue(msg("q", "a"), msg("q", "b"))
	ds := fetch(t, c, 10)
	if got := ids(ds); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("fetched %v, want [b] (the second a is discarded)", got)
	}
	if n, _ := e.c.LLen(ctx, e.key("q", "dead")).Result(); n != 1 {
		t.Fatalf("dead holds %d, want 1", n)
	}
	if err := c.Ack(ctx, first); err != nil {
		t.Fatalf("the first a lost its in-flight entry: %v", err)
	}
}

func TestReclaimedMessagesGoFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"))
	c := e.open("q", time.Minute)
	fetch(t, c, 1)
	e.enqueue(msg("q", "c"))
	e.expireLeases("q")
	if n, err := e.d.Reap(ctx, "q"); err != nil || n != 1 {
		t.Fatalf("reap: %d, %v", n, err)
	}
	if got := ids(fetchN(t, c, 3)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after reap: %v, want [a b c]: a recovered job is next", got)
	}
}

func TestExpiredLeaseReachesAWaitingFetch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.enqueue(msg("q", "a"))
	crashed := e.open("q", 300*time.Millisecond)
	first := fetch(t, crashed, 1)[0]
	// Nobody pushes anything: the waiting Fetch must wake for the lease
	// deadline fetch.lua reported, and reclaim the message itself.
	c := e.open("q", time.Minute)
	d := fetch(t, c, 1)[0]
	if d.ID != "a" || d.Recoveries != 1 {
		t.Fatalf("fetched %s with %d recoveries, want a with 1", d.ID, d.Recoveries)
	}
	if late := time.Since(first.LeaseDeadline); late > 300*time.Millisecond {
		t.Fatalf("redelivered %v after the lease ran out", late)
	}
}
