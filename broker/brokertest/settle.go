package brokertest

import (
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// testRetry proves Retry(now) delivers the message again at once with
// Retries+1, that the retried delivery is dead (its Ack is refused), and,
// with Delay, that Retry(at) holds the message back until at.
func testRetry(t *testing.T, e *env) {
	const q = "retry"
	c := Open(t, e.d, q, nil)
	if e.caps.Delay {
		Promote(t, e.d, q)
	}
	m := NewMessage(q, 1)
	m.Headers = map[string]string{"k": "v"}
	m.MaxAttempts = 5
	Enqueue(t, e.d, m)
	ctx := Context(t, 30*time.Second)

	d0 := FetchOne(t, c, 5*time.Second)
	if err := c.Retry(ctx, d0, time.Now()); err != nil {
		t.Fatalf("Retry(now): %v", err)
	}
	d1 := FetchOne(t, c, 5*time.Second)
	if d1.ID != m.ID || d1.Retries != d0.Retries+1 || d1.Recoveries != d0.Recoveries {
		t.Fatalf("after Retry(now) fetched %s attempt %d recoveries %d, want %s attempt %d recoveries %d",
			d1.ID, d1.Retries, d1.Recoveries, m.ID, d0.Retries+1, d0.Recoveries)
	}
	checkSameMessage(t, &d1.Message, m)
	if d1.Token == d0.Token {
		t.Errorf("retried delivery reuses token %q", d1.Token)
	}
	checkLeaseLost(t, "Ack of a retried delivery", c.Ack(ctx, d0), d0, true)

	last := d1
	if e.caps.Delay {
		at := time.Now().Add(700 * time.Millisecond)
		if err := c.Retry(ctx, d1, at); err != nil {
			t.Fatalf("Retry(at): %v", err)
		}
		d2 := FetchOne(t, c, time.Until(at)+5*time.Second)
		got := time.Now()
		if got.Before(at.Add(-clockSlack)) {
			t.Fatalf("Retry(at) delivered %v early", at.Sub(got))
		}
		t.Logf("Retry(at) delivered %v after at", got.Sub(at))
		if d2.ID != m.ID || d2.Retries != d1.Retries+1 {
			t.Fatalf("after Retry(at) fetched %s attempt %d, want %s attempt %d", d2.ID, d2.Retries, m.ID, d1.Retries+1)
		}
		last = d2
	}
	if err := c.Ack(ctx, last); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
}

// testRelease proves Release hands deliveries back at once without counting
// an attempt, and that a released delivery is dead.
func testRelease(t *testing.T, e *env) {
	const q, n = "release", 3
	c := Open(t, e.d, q, nil)
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
	}
	Enqueue(t, e.d, msgs...)
	ctx := Context(t, 30*time.Second)

	first := FetchN(t, c, n, n, 5*time.Second)
	byID := map[string]*broker.Delivery{}
	for _, d := range first {
		byID[d.ID] = d
	}
	if err := c.Release(ctx, first...); err != nil {
		t.Fatalf("Release of %d: %v", n, err)
	}
	start := time.Now()
	again := FetchN(t, c, n, n, 5*time.Second)
	if took := time.Since(start); took > wakeBound {
		t.Errorf("released deliveries came back after %v, want at once (within %v)", took, wakeBound)
	}
	for _, d := range again {
		prev, ok := byID[d.ID]
		if !ok {
			t.Fatalf("fetched %s after Release, want one of %v", d.ID, IDs(first))
		}
		delete(byID, d.ID)
		if d.Retries != prev.Retries || d.Recoveries != prev.Recoveries {
			t.Errorf("%s after Release: attempt %d recoveries %d, want %d %d (unchanged)",
				d.ID, d.Retries, d.Recoveries, prev.Retries, prev.Recoveries)
		}
	}
	checkLeaseLost(t, "Ack of a released delivery", c.Ack(ctx, first[0]), first[0], true)
	if err := c.Ack(ctx, again...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
}

// testDelayedEnqueue proves Message.RunAt in the future holds a message back
// until then, and RunAt in the past does not delay it.
func testDelayedEnqueue(t *testing.T, e *env) {
	const q = "delayed"
	c := Open(t, e.d, q, nil)
	Promote(t, e.d, q)
	later := NewMessage(q, 1)
	later.RunAt = time.Now().Add(500 * time.Millisecond)
	past := NewMessage(q, 2)
	past.RunAt = time.Now().Add(-time.Hour)
	Enqueue(t, e.d, later, past)
	ctx := Context(t, 30*time.Second)

	d := FetchOne(t, c, 5*time.Second)
	if d.ID != past.ID {
		t.Fatalf("first fetched %s, want %s (RunAt in the past) before %s (RunAt ahead)", d.ID, past.ID, later.ID)
	}
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	d = FetchOne(t, c, time.Until(later.RunAt)+5*time.Second)
	got := time.Now()
	if d.ID != later.ID {
		t.Fatalf("fetched %s, want %s", d.ID, later.ID)
	}
	if got.Before(later.RunAt.Add(-clockSlack)) {
		t.Fatalf("delayed message fetched %v before its RunAt", later.RunAt.Sub(got))
	}
	t.Logf("delayed message fetched %v after RunAt", got.Sub(later.RunAt))
	if d.Retries != 0 {
		t.Errorf("delayed message Retries %d, want 0", d.Retries)
	}
	checkSameMessage(t, &d.Message, later)
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

// testPostpone proves Postpone hands a delivery back without counting an
// attempt, that the postponed delivery is dead, and, with Delay, that
// Postpone(at) holds the message back until at.
func testPostpone(t *testing.T, e *env) {
	const q = "postpone"
	c := Open(t, e.d, q, nil)
	if e.caps.Delay {
		Promote(t, e.d, q)
	}
	m := NewMessage(q, 1)
	Enqueue(t, e.d, m)
	ctx := Context(t, 30*time.Second)

	d0 := FetchOne(t, c, 5*time.Second)
	if err := c.Postpone(ctx, d0, time.Now()); err != nil {
		t.Fatalf("Postpone(now): %v", err)
	}
	d1 := FetchOne(t, c, 5*time.Second)
	if d1.ID != m.ID || d1.Retries != d0.Retries {
		t.Fatalf("after Postpone(now) fetched %s attempt %d, want %s attempt %d (no attempt counted)", d1.ID, d1.Retries, m.ID, d0.Retries)
	}
	checkSameMessage(t, &d1.Message, m)
	checkLeaseLost(t, "Ack of a postponed delivery", c.Ack(ctx, d0), d0, true)

	last := d1
	if e.caps.Delay {
		at := time.Now().Add(700 * time.Millisecond)
		if err := c.Postpone(ctx, d1, at); err != nil {
			t.Fatalf("Postpone(at): %v", err)
		}
		d2 := FetchOne(t, c, time.Until(at)+5*time.Second)
		if got := time.Now(); got.Before(at.Add(-clockSlack)) {
			t.Fatalf("Postpone(at) delivered %v early", at.Sub(got))
		}
		if d2.ID != m.ID || d2.Retries != d0.Retries {
			t.Fatalf("after Postpone(at) fetched %s attempt %d, want %s attempt %d", d2.ID, d2.Retries, m.ID, d0.Retries)
		}
		last = d2
	}
	if err := c.Ack(ctx, last); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
}

// testUniqueKey proves a message whose UniqueKey another message of the
// queue holds is refused with a *broker.DuplicateError naming the key, the
// other messages of the call are stored, and the key is free again after
// its TTL.
func testUniqueKey(t *testing.T, e *env) {
	const q = "unique"
	c := Open(t, e.d, q, nil)
	ctx := Context(t, 30*time.Second)
	first, dup, other := NewMessage(q, 1), NewMessage(q, 2), NewMessage(q, 3)
	first.UniqueKey, first.UniqueTTL = "charge:7", 300*time.Millisecond
	dup.UniqueKey, dup.UniqueTTL = "charge:7", time.Hour
	other.UniqueKey, other.UniqueTTL = "charge:8", time.Hour
	err := e.d.Enqueue(ctx, []*broker.Message{first, dup, other})
	var de *broker.DuplicateError
	if !errors.Is(err, broker.ErrDuplicate) || !errors.As(err, &de) || de.ID != dup.ID || de.Key != "charge:7" || de.Queue != q {
		t.Fatalf("Enqueue of two messages with one unique key: %v, want a *broker.DuplicateError for %s naming charge:7", err, dup.ID)
	}
	ds := FetchN(t, c, 2, 10, 5*time.Second)
	got := map[string]bool{}
	for _, d := range ds {
		got[d.ID] = true
	}
	if len(ds) != 2 || !got[first.ID] || !got[other.ID] {
		t.Fatalf("fetched %v, want %s and %s", got, first.ID, other.ID)
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	// The key is held for its TTL even though its message is done.
	again := NewMessage(q, 4)
	again.UniqueKey, again.UniqueTTL = "charge:7", time.Hour
	if err := e.d.Enqueue(ctx, []*broker.Message{again}); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("Enqueue while the key is held: %v, want ErrDuplicate", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := e.d.Enqueue(ctx, []*broker.Message{again})
		if err == nil {
			break
		}
		if !errors.Is(err, broker.ErrDuplicate) || time.Now().After(deadline) {
			t.Fatalf("Enqueue after the key's TTL: %v, want it stored within 5s", err)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) { // the TTL is the event: poll it with a deadline
			t.Fatal(ctx.Err())
		}
	}
	if d := FetchOne(t, c, 5*time.Second); d.ID != again.ID {
		t.Fatalf("fetched %s, want %s", d.ID, again.ID)
	}
}
