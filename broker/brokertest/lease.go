package brokertest

import (
	"bytes"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// Lease lengths of the lease tests. The first consumer's lease is short so
// the test is quick; the second's is longer so that it keeps the message
// while the test pokes at the first delivery, whichever way the driver
// measures expiry (the holder's deadline, as a lease ZSET does, or the
// claimer's idle threshold, as XAUTOCLAIM does).
const (
	shortLease = 300 * time.Millisecond
	longLease  = 2 * time.Second
	// clockSlack absorbs millisecond rounding between Redis TIME and the
	// local clock (the same machine in these tests).
	clockSlack = 5 * time.Millisecond
)

// redeliver fetches a message on c1 with a short lease, lets the lease run
// out without settling, and fetches the message again on c2.
func redeliver(t *testing.T, e *env, q string) (c1, c2 broker.Consumer, d1, d2 *broker.Delivery) {
	t.Helper()
	c1 = Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	c2 = Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: longLease})
	m := NewMessage(q, 1)
	m.Headers = map[string]string{"h": "v"}
	Enqueue(t, e.d, m)
	d1 = FetchOne(t, c1, 5*time.Second)
	if d1.ID != m.ID {
		t.Fatalf("fetched %s, want %s", d1.ID, m.ID)
	}
	d2 = FetchOne(t, c2, 10*time.Second)
	got := time.Now()
	if d2.ID != m.ID {
		t.Fatalf("second consumer fetched %s, want the expired %s", d2.ID, m.ID)
	}
	if got.Before(d1.LeaseDeadline.Add(-clockSlack)) {
		t.Errorf("redelivered at %v, before the first lease ran out at %v", got, d1.LeaseDeadline)
	}
	if d2.Recoveries != d1.Recoveries+1 {
		t.Errorf("Recoveries after a lease expiry = %d, want %d", d2.Recoveries, d1.Recoveries+1)
	}
	if d2.Retries != d1.Retries {
		t.Errorf("Retries after a lease expiry = %d, want %d (recoveries are not attempts)", d2.Retries, d1.Retries)
	}
	if d2.Token == "" || d2.Token == d1.Token {
		t.Errorf("redelivery Token %q, first %q: want a new, non-empty token", d2.Token, d1.Token)
	}
	if !d2.LeaseDeadline.After(got.Add(-clockSlack)) {
		t.Errorf("redelivery LeaseDeadline %v is not after its fetch at %v", d2.LeaseDeadline, got)
	}
	if !bytes.Equal(d2.Payload, m.Payload) || d2.Kind != m.Kind || d2.Headers["h"] != "v" {
		t.Errorf("redelivered message changed: %+v", d2.Message)
	}
	return c1, c2, d1, d2
}

// testRedelivery proves a message whose lease expires unsettled is delivered
// again to another consumer blocked in Fetch, counted as a recovery.
func testRedelivery(t *testing.T, e *env) {
	_, c2, _, d2 := redeliver(t, e, "redeliver")
	if err := c2.Ack(Context(t, 5*time.Second), d2); err != nil {
		t.Fatalf("Ack of the redelivery: %v", err)
	}
}

// testStaleAck proves fencing: once a message was delivered again, the first
// delivery can neither settle nor extend it, a batch settles what it can and
// names what it could not, and the second consumer still holds the message.
func testStaleAck(t *testing.T, e *env) {
	const q = "stale"
	c1, c2, d1, d2 := redeliver(t, e, q)
	ctx := Context(t, 30*time.Second)

	// A batch with one stale and one live delivery acks the live one and
	// reports the stale one alone. This runs first, while the redelivery is
	// fresh, so that c1's Fetch cannot find it idle long enough to claim.
	Enqueue(t, e.d, NewMessage(q, 2))
	live := FetchOne(t, c1, 5*time.Second)
	if live.ID == d1.ID {
		t.Fatalf("c1 fetched %s again while c2 holds it", live.ID)
	}
	err := c1.Ack(ctx, d1, live)
	if errs := batchErrors(err); len(errs) != 1 {
		t.Errorf("Ack(stale, live) = %v, want one error, for the stale delivery", err)
	}
	checkLeaseLost(t, "Ack(stale, live)", err, d1, true)

	if e.caps.Extend {
		// Keep the holder's lease safe from the rest of the test's pace.
		if err := c2.Extend(ctx, 30*time.Second, d2); err != nil {
			t.Fatalf("Extend by the holder: %v", err)
		}
	}
	checkLeaseLost(t, "Ack", c1.Ack(ctx, d1), d1, true)
	checkLeaseLost(t, "Release", c1.Release(ctx, d1), d1, true)
	checkLeaseLost(t, "Retry", c1.Retry(ctx, d1, time.Now()), d1, false)
	if e.caps.Discard {
		checkLeaseLost(t, "Discard", c1.Discard(ctx, d1, "stale"), d1, false)
	}
	if e.caps.Extend {
		checkLeaseLost(t, "Extend", c1.Extend(ctx, 10*time.Second, d1), d1, true)
	}

	if err := c2.Ack(ctx, d2); err != nil {
		t.Fatalf("Ack by the holder after stale settles: %v", err)
	}
	// Nothing the stale calls did may have put the message back, and the
	// live one was acked: a fresh consumer with a short lease finds nothing.
	c3 := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	ExpectNone(t, c3, 4*shortLease)
}

// testExtend proves Extend keeps a lease alive for several lease lengths
// while another consumer keeps fetching, and moves LeaseDeadline forward.
func testExtend(t *testing.T, e *env) {
	// The lease is ten times the pace of the loop, so that a loaded machine
	// (a slow ExpectNone under -race) cannot let it run out between two
	// extensions, which would fail a correct driver.
	const q, lease = "extend", time.Second
	c1 := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: lease})
	c2 := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: lease})
	Enqueue(t, e.d, NewMessage(q, 1))
	d := FetchOne(t, c1, 5*time.Second)
	ctx := Context(t, 30*time.Second)
	start := time.Now()
	rounds := 0
	// Each round the second consumer's short Fetch paces the loop and
	// checks the message stays hidden; the extension follows at once.
	for time.Since(start) < 3*lease+lease/2 {
		ExpectNone(t, c2, lease/10)
		prev := d.LeaseDeadline
		before := time.Now()
		if err := c1.Extend(ctx, lease, d); err != nil {
			t.Fatalf("Extend in round %d: %v", rounds, err)
		}
		if !d.LeaseDeadline.After(prev) {
			t.Fatalf("Extend left LeaseDeadline at %v (was %v)", d.LeaseDeadline, prev)
		}
		if d.LeaseDeadline.Before(before.Add(lease - clockSlack)) {
			t.Fatalf("LeaseDeadline %v after Extend(%v) at %v, want at least now+ttl", d.LeaseDeadline, lease, before)
		}
		rounds++
	}
	if err := c1.Ack(ctx, d); err != nil {
		t.Fatalf("Ack after %d extensions: %v", rounds, err)
	}
	ExpectNone(t, c2, lease)
}
