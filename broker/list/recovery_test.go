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
	"github.com/conveyorq/conveyor/internal/codec"
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
	// An extension cannot bring a reclaimed lease back.
	if err := c.Extend(ctx, time.Minute, stale); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("extend of a reclaimed delivery: %v, want ErrLeaseLost", err)
	}
	if n, err := e.c.ZCard(ctx, e.key("q", "lease")).Result(); err != nil || n != 0 {
		t.Fatalf("leases after a stale extend: %d (%v), want 0", n, err)
	}
	fresh := fetch(t, c, 1)[0]
	if fresh.ID != "a" || fresh.Recoveries != 1 || fresh.Retries != 0 || fresh.Token == stale.Token {
		t.Fatalf("redelivery: id %s recoveries %d attempt %d token %s (stale %s)",
			fresh.ID, fresh.Recoveries, fresh.Retries, fresh.Token, stale.Token)
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

// TestLeaseHoldsTheReceipt: a leased message lives in the inflight HASH
// under the delivery's receipt, which is its member of the lease ZSET,
// scored by its deadline; nothing else is kept while it is in flight.
func TestLeaseHoldsTheReceipt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	m := msg("q", "a")
	m.Payload = make([]byte, 100)
	e.enqueue(m)
	c := e.open("q", time.Minute)
	d := fetch(t, c, 1)[0]
	zs, err := e.c.ZRangeWithScores(ctx, e.key("q", "lease"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	// LeaseDeadline is by the local clock, taken before the fetch was sent:
	// never after the server's deadline, and near it on one machine.
	if len(zs) != 1 || zs[0].Member != d.Receipt || int64(zs[0].Score) < d.LeaseDeadline.UnixMilli() ||
		int64(zs[0].Score) > d.LeaseDeadline.Add(time.Second).UnixMilli() {
		t.Fatalf("lease ZSET %v, want one member, the receipt, scored from %d to a second later", zs, d.LeaseDeadline.UnixMilli())
	}
	v, err := e.c.HGet(ctx, e.key("q", "inflight"), d.Receipt).Result()
	if err != nil {
		t.Fatal(err)
	}
	var stored broker.Message
	n, err := codec.Decode([]byte(v), &stored)
	if err != nil || n != 1 || stored.ID != "a" || len(stored.Payload) != 100 {
		t.Fatalf("inflight message decodes to %+v with %d deliveries (%v), want a with 1", stored, n, err)
	}
	if want := []string{e.key("q", "inflight"), e.key("q", "lease")}; !slices.Equal(slices.Sorted(slices.Values(redistest.Keys(t, e.c, e.prefix))), want) {
		t.Fatalf("keys while one message is in flight: %v, want %v", redistest.Keys(t, e.c, e.prefix), want)
	}
}

// TestLeaseKeysAreNoListpacks: the receipt alone, for the shortest job, is
// longer than Redis's 64-byte listpack limit, so the lease ZSET is a
// skiplist and the inflight HASH a hash table from the first lease: a
// listpack finds and inserts by a scan, which costs 3 to 4 times as much with
// 100 leases in flight.
func TestLeaseKeysAreNoListpacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(&broker.Message{ID: "a", Kind: "k", Queue: "q"})
	c := e.open("q", time.Minute)
	d := fetch(t, c, 1)[0]
	if len(d.Receipt) <= 64 {
		t.Errorf("receipt %q is %d bytes, want over 64", d.Receipt, len(d.Receipt))
	}
	for part, want := range map[string]string{"lease": "skiplist", "inflight": "hashtable"} {
		if enc, err := e.c.ObjectEncoding(ctx, e.key("q", part)).Result(); err != nil || enc != want {
			t.Errorf("%s encoding %q (%v), want %s", part, enc, err, want)
		}
	}
}

// TestReusedLiveIDIsLeasedApart: a producer that reuses the ID of a message
// in flight gets a second message with its own lease; each settles alone.
func TestReusedLiveIDIsLeasedApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	c := e.open("q", time.Minute)
	first := fetch(t, c, 1)[0]
	second := msg("q", "a")
	second.Payload = []byte("another payload")
	e.enqueue(second)
	d := fetch(t, c, 10)
	if len(d) != 1 || d[0].ID != "a" || string(d[0].Payload) != "another payload" || d[0].Receipt == first.Receipt {
		t.Fatalf("fetched %v, want the second a with a receipt of its own", ids(d))
	}
	if err := c.Ack(ctx, first); err != nil {
		t.Fatalf("ack of the first a: %v", err)
	}
	if err := c.Retry(ctx, d[0], time.Time{}); err != nil {
		t.Fatalf("retry of the second a after the first was acked: %v", err)
	}
	if again := fetch(t, c, 10); len(again) != 1 || string(again[0].Payload) != "another payload" || again[0].Retries != 1 {
		t.Fatalf("after retry fetched %v, want the second a at attempt 1", ids(again))
	}
}

// TestIdenticalCopiesAreLeasedApart: two byte-identical copies of a
// message (a producer enqueued the same ID and content twice) are two
// deliveries with receipts of their own, fetched together or apart.
func TestIdenticalCopiesAreLeasedApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	same := func() *broker.Message {
		m := msg("q", "a")
		m.EnqueuedAt = time.UnixMilli(1_700_000_000_000)
		return m
	}
	c := e.open("q", time.Minute)

	e.enqueue(same(), msg("q", "b"), same())
	ds := fetch(t, c, 10)
	if got := ids(ds); !slices.Equal(got, []string{"a", "b", "a"}) || ds[0].Receipt == ds[2].Receipt {
		t.Fatalf("fetched %v, want [a b a], each with its receipt", got)
	}
	e.enqueue(same())
	ds = append(ds, fetch(t, c, 1)...)
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	if ks := redistest.Keys(t, e.c, e.prefix); len(ks) != 0 {
		t.Fatalf("keys left: %v", ks)
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
