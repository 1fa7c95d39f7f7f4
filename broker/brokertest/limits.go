package brokertest

import (
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

func limited(c broker.Capabilities) bool   { return c.Limits && c.AtLeastOnce && c.Delay && c.Discard }
func unlimited(c broker.Capabilities) bool { return !c.Limits }

// testLimitUnsupported proves that a driver without Capabilities.Limits
// refuses to set a limit rather than ignore it.
func testLimitUnsupported(t *testing.T, e *env) {
	l, ok := e.d.(broker.Limiter)
	if !ok {
		return // nothing to call: no limit can be set
	}
	if err := l.SetLimit(Context(t, 10*time.Second), "limit-unsupported", "k", 1); !errors.Is(err, broker.ErrUnsupported) {
		t.Fatalf("SetLimit = %v, want broker.ErrUnsupported", err)
	}
}

// kindOf returns message i of queue with kind k.
func kindOf(queue string, i int, k string) *broker.Message {
	m := NewMessage(queue, i)
	m.Kind = k
	return m
}

// setLimit sets queue's limit of kind to n and fails t on error.
func setLimit(t *testing.T, l broker.Limiter, queue, kind string, n int) {
	t.Helper()
	if err := l.SetLimit(Context(t, 10*time.Second), queue, kind, n); err != nil {
		t.Fatalf("SetLimit(%q, %q, %d): %v", queue, kind, n, err)
	}
}

// wantLimit fails t unless queue's limit of kind reads max, running and
// waiting.
func wantLimit(t *testing.T, l broker.Limiter, queue, kind string, max int, running, waiting int64) {
	t.Helper()
	ls, err := l.Limits(Context(t, 10*time.Second), queue)
	if err != nil {
		t.Fatalf("Limits(%q): %v", queue, err)
	}
	for _, x := range ls {
		if x.Kind == kind {
			if x.Max != max || x.Running != running || x.Waiting != waiting {
				t.Fatalf("limit %q: %+v, want max %d, running %d, waiting %d", kind, x, max, running, waiting)
			}
			return
		}
	}
	if max != 0 || running != 0 || waiting != 0 {
		t.Fatalf("limit %q not listed (%+v), want max %d, running %d, waiting %d", kind, ls, max, running, waiting)
	}
}

// countKind returns how many of ds have kind k.
func countKind(ds map[string]*broker.Delivery, k string) int {
	n := 0
	for _, d := range ds {
		if d.Kind == k {
			n++
		}
	}
	return n
}

// testLimitKind proves a limit on a kind: no more of its jobs are out at
// once than the limit, other kinds are not held back, the jobs over it wait
// without counting an attempt, and every way a delivery ends (ack, retry,
// postpone, release, discard) gives its slot back and lets the next
// waiting job in, oldest first; a raised limit lets jobs in at once, a
// removed one lets them all in.
func testLimitKind(t *testing.T, e *env) {
	const q = "limit-kind"
	skipSplitLimit(t, e, q)
	ctx := Context(t, 60*time.Second)
	l := e.d.(broker.Limiter)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	id := func(i int) string { return NewMessage(q, i).ID }
	setLimit(t, l, q, "slow", 2)
	var ms []*broker.Message
	for i := 1; i <= 8; i++ {
		ms = append(ms, kindOf(q, i, "slow"))
	}
	ms = append(ms, kindOf(q, 20, "fast"), kindOf(q, 21, "fast"))
	Enqueue(t, e.d, ms...)
	got := fetchIDs(t, c, 20, 5*time.Second)
	for len(got) < 4 {
		for k, d := range fetchIDs(t, c, 20, 5*time.Second) {
			got[k] = d
		}
	}
	wantIDs(t, "first fetches", got, id(1), id(2), id(20), id(21))
	ExpectNone(t, c, 300*time.Millisecond)
	wantLimit(t, l, q, "slow", 2, 2, 6)
	if x, ok := e.d.(broker.Inspector); ok {
		if s := sizesOf(t, x, q); s.Limited != 6 || s.InFlight != 4 {
			t.Fatalf("sizes: limited %d, in flight %d; want 6 and 4", s.Limited, s.InFlight)
		}
	}
	Ack(t, c, got[id(20)], got[id(21)])
	ExpectNone(t, c, 300*time.Millisecond)

	// Each end gives a slot back: the next waiting job comes, in order.
	Ack(t, c, got[id(1)])
	d3 := FetchOne(t, c, 5*time.Second)
	if d3.ID != id(3) || d3.Retries != 0 {
		t.Fatalf("after an ack, delivered %s (attempts %d), want %s with none", d3.ID, d3.Retries, id(3))
	}
	if err := c.Discard(ctx, got[id(2)], "test"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	d4 := FetchOne(t, c, 5*time.Second)
	if d4.ID != id(4) {
		t.Fatalf("after a discard, delivered %s, want %s", d4.ID, id(4))
	}
	ExpectNone(t, c, 300*time.Millisecond)
	if err := c.Retry(ctx, d3, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	d5 := FetchOne(t, c, 5*time.Second)
	if d5.ID != id(5) {
		t.Fatalf("after a retry, delivered %s, want %s", d5.ID, id(5))
	}
	if err := c.Postpone(ctx, d4, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Postpone: %v", err)
	}
	d6 := FetchOne(t, c, 5*time.Second)
	if d6.ID != id(6) {
		t.Fatalf("after a postpone, delivered %s, want %s", d6.ID, id(6))
	}
	// A release hands 5 back and lets 7 in: the limit has one slot free,
	// so one of the two runs and the other waits.
	if err := c.Release(ctx, d5); err != nil {
		t.Fatalf("Release: %v", err)
	}
	out := fetchIDs(t, c, 20, 5*time.Second)
	if len(out) != 1 {
		t.Fatalf("after a release, delivered %d jobs, want 1", len(out))
	}
	ExpectNone(t, c, 300*time.Millisecond)
	wantLimit(t, l, q, "slow", 2, 2, 2)

	// Raised to 4: both waiting jobs run at once.
	setLimit(t, l, q, "slow", 4)
	more := fetchIDs(t, c, 20, 5*time.Second)
	for len(more) < 2 {
		for k, d := range fetchIDs(t, c, 20, 5*time.Second) {
			more[k] = d
		}
	}
	if len(more) != 2 {
		t.Fatalf("after raising the limit, delivered %d, want 2", len(more))
	}
	wantLimit(t, l, q, "slow", 4, 4, 0)
	for _, d := range out {
		Ack(t, c, d)
	}
	for _, d := range more {
		Ack(t, c, d)
	}
	Ack(t, c, d6)
	wantLimit(t, l, q, "slow", 4, 0, 0)
	setLimit(t, l, q, "slow", 0)
	wantNoLimits(t, l, q)
}

// wantNoLimits fails t unless queue has no limit, no slot held and no job
// waiting: nothing of its limits is left.
func wantNoLimits(t *testing.T, l broker.Limiter, queue string) {
	t.Helper()
	ls, err := l.Limits(Context(t, 10*time.Second), queue)
	if err != nil {
		t.Fatalf("Limits(%q): %v", queue, err)
	}
	if len(ls) != 0 {
		t.Fatalf("Limits(%q) = %+v, want none", queue, ls)
	}
}

// testLimitQueue proves a limit on the whole queue, and one removed while
// jobs wait: they all come.
func testLimitQueue(t *testing.T, e *env) {
	const q = "limit-queue"
	skipSplitLimit(t, e, q)
	l := e.d.(broker.Limiter)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	setLimit(t, l, q, "", 3)
	var ms []*broker.Message
	for i := 1; i <= 10; i++ {
		ms = append(ms, kindOf(q, i, []string{"a", "b"}[i%2]))
	}
	Enqueue(t, e.d, ms...)
	got := fetchIDs(t, c, 20, 5*time.Second)
	for len(got) < 3 {
		for k, d := range fetchIDs(t, c, 20, 5*time.Second) {
			got[k] = d
		}
	}
	if len(got) != 3 {
		t.Fatalf("a queue limit of 3 delivered %d", len(got))
	}
	ExpectNone(t, c, 300*time.Millisecond)
	wantLimit(t, l, q, "", 3, 3, 7)
	setLimit(t, l, q, "", 0)
	rest := FetchN(t, c, 7, 20, 5*time.Second)
	ExpectNone(t, c, 300*time.Millisecond)
	for _, d := range got {
		Ack(t, c, d)
	}
	Ack(t, c, rest...)
	wantLimit(t, l, q, "", 0, 0, 0)
}

// testLimitLeaseExpiry proves that a dead holder's slots come back with
// its leases: a consumer that never settles holds the limit until its
// leases run out, and then the jobs run again (the waiting ones too, in
// the slots that came back).
func testLimitLeaseExpiry(t *testing.T, e *env) {
	const q = "limit-expiry"
	skipSplitLimit(t, e, q)
	l := e.d.(broker.Limiter)
	const vt = time.Second
	dead := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: vt})
	setLimit(t, l, q, "k", 2)
	var ms []*broker.Message
	for i := 1; i <= 4; i++ {
		ms = append(ms, kindOf(q, i, "k"))
	}
	Enqueue(t, e.d, ms...)
	held := fetchIDs(t, dead, 10, 5*time.Second)
	for len(held) < 2 {
		for k, d := range fetchIDs(t, dead, 10, 5*time.Second) {
			held[k] = d
		}
	}
	start := time.Now()
	// Of the same lease: a stream consumer judges an entry expired by its
	// own visibility timeout.
	live := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: vt})
	// Nothing runs until the dead consumer's leases run out; then two run.
	ds := FetchN(t, live, 2, 1, 10*time.Second)
	if took := time.Since(start); took < vt-100*time.Millisecond {
		t.Fatalf("a job ran %v after the limit was taken, before the holder's leases (%v) ran out", took, vt)
	}
	ExpectNone(t, live, 300*time.Millisecond)
	wantLimit(t, l, q, "k", 2, 2, 2)
	Ack(t, live, ds...)
	rest := FetchN(t, live, 2, 10, 5*time.Second)
	Ack(t, live, rest...)
	wantLimit(t, l, q, "k", 2, 0, 0)
	// The dead holder's settles are refused: its slots went with its leases.
	for _, d := range held {
		if err := dead.Ack(Context(t, 10*time.Second), d); !errors.Is(err, broker.ErrLeaseLost) {
			t.Fatalf("Ack by the dead holder = %v, want broker.ErrLeaseLost", err)
		}
	}
	wantLimit(t, l, q, "k", 2, 0, 0)
}

// testLimitCancel proves that a job waiting for a slot can be cancelled
// (reported ready: it waits in the queue's care), and then never runs.
func testLimitCancel(t *testing.T, e *env) {
	const q = "limit-cancel"
	skipSplitLimit(t, e, q)
	cn, ok := e.d.(broker.Canceler)
	if !ok || !e.caps.Cancel {
		t.Skipf("driver %T cannot cancel jobs", e.d)
	}
	l := e.d.(broker.Limiter)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	id := func(i int) string { return NewMessage(q, i).ID }
	setLimit(t, l, q, "k", 1)
	Enqueue(t, e.d, kindOf(q, 1, "k"), kindOf(q, 2, "k"), kindOf(q, 3, "k"))
	d1 := FetchOne(t, c, 5*time.Second)
	ExpectNone(t, c, 300*time.Millisecond)
	wantLimit(t, l, q, "k", 1, 1, 2)
	cancelJob(t, cn, q, id(2), broker.JobReady)
	wantLimit(t, l, q, "k", 1, 1, 1)
	Ack(t, c, d1)
	d3 := FetchOne(t, c, 5*time.Second)
	if d3.ID != id(3) {
		t.Fatalf("after cancelling 2, delivered %s, want %s", d3.ID, id(3))
	}
	Ack(t, c, d3)
	ExpectNone(t, c, 300*time.Millisecond)
	wantLimit(t, l, q, "k", 1, 0, 0)

	// A job let in by a slot, cancelled before it took the slot: the slot
	// is free, so the next waiting job comes.
	Enqueue(t, e.d, kindOf(q, 4, "k"), kindOf(q, 5, "k"), kindOf(q, 6, "k"))
	d4 := FetchOne(t, c, 5*time.Second)
	// 5 and 6 wait: a second consumer's fetch finds them over the limit.
	// It is closed before 5 is let in, which ends its read: a driver that
	// reads in the background (stream) could otherwise still have the read
	// blocked in Redis, and it would take 5 as soon as 5 was let in.
	c2 := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	ExpectNone(t, c2, 300*time.Millisecond)
	if err := c2.Close(Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantLimit(t, l, q, "k", 1, 1, 2)
	Ack(t, c, d4) // 5 is let in
	cancelJob(t, cn, q, id(5), broker.JobReady)
	d6 := FetchOne(t, c, 5*time.Second)
	if d6.ID != id(6) {
		t.Fatalf("after cancelling 5, let in but not fetched, delivered %s, want %s", d6.ID, id(6))
	}
	Ack(t, c, d6)

	// A kind's job waiting behind the queue's limit, cancelled: nothing of
	// either limit is left once they are removed.
	setLimit(t, l, q, "", 1)
	Enqueue(t, e.d, kindOf(q, 7, "other"), kindOf(q, 8, "k"))
	d7 := FetchOne(t, c, 5*time.Second)
	ExpectNone(t, c, 300*time.Millisecond)
	cancelJob(t, cn, q, id(8), broker.JobReady)
	Ack(t, c, d7)
	setLimit(t, l, q, "", 0)
	setLimit(t, l, q, "k", 0)
	wantNoLimits(t, l, q)
}

// testLimitRaise proves that raising a limit lets in what the new limit
// has room for, and no more, however many jobs wait.
func testLimitRaise(t *testing.T, e *env) {
	const q = "limit-raise"
	skipSplitLimit(t, e, q)
	l := e.d.(broker.Limiter)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	const n = 2100
	setLimit(t, l, q, "k", 1)
	ms := make([]*broker.Message, n)
	for i := range ms {
		ms[i] = kindOf(q, i, "k")
	}
	Enqueue(t, e.d, ms...)
	d := FetchOne(t, c, 5*time.Second)
	ExpectNone(t, c, time.Second) // the fetches move the rest to the line
	wantLimit(t, l, q, "k", 1, 1, n-1)
	setLimit(t, l, q, "k", 1500)
	wantLimit(t, l, q, "k", 1500, 1, n-1500)
	Ack(t, c, d)
	setLimit(t, l, q, "k", 0)
	got := 0
	for got < n-1 {
		ds := Fetch(t, c, 1000, 10*time.Second)
		Ack(t, c, ds...)
		got += len(ds)
	}
	wantNoLimits(t, l, q)
}

// testLimitInvalid proves SetLimit's checks.
func testLimitInvalid(t *testing.T, e *env) {
	l := e.d.(broker.Limiter)
	ctx := Context(t, 10*time.Second)
	for _, c := range []struct {
		queue, kind string
		n           int
	}{{"limit-invalid", "k", -1}, {"limit-invalid", "k", broker.MaxLimit + 1}, {"limit-invalid", "a b", 1}, {"", "k", 1}, {"limit{x}", "k", 1}} {
		if err := l.SetLimit(ctx, c.queue, c.kind, c.n); err == nil {
			t.Errorf("SetLimit(%q, %q, %d) = nil, want an error", c.queue, c.kind, c.n)
		}
	}
}

// skipSplitLimit skips a limit test on a split queue: each partition holds
// a share of a limit (broker/shard), so a limit below the partition count
// is refused and jobs wait for their own partition's share; broker/shard's
// tests prove its limits.
func skipSplitLimit(t *testing.T, e *env, q string) {
	t.Helper()
	if split(e.d, q) {
		t.Skip("a split queue's limit is shared out among its partitions (broker/shard tests it)")
	}
}
