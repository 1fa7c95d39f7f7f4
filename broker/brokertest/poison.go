package brokertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
)

// testPoison proves DESIGN invariant 3 with the driver's defaults: a message
// whose lease runs out broker.DefaultMaxRecoveries times (its worker died
// holding it each time) goes to the discard key with a poison reason and is
// not delivered again.
func testPoison(t *testing.T, e *env) {
	const q = "poison"
	m := NewMessage(q, 1)
	Enqueue(t, e.d, m)
	for i := range broker.DefaultMaxRecoveries {
		// A new consumer each time, as a restarted worker would be.
		c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
		d := FetchOne(t, c, 10*time.Second)
		if d.ID != m.ID || d.Recoveries != i {
			t.Fatalf("delivery %d: %s with Recoveries %d, want %s with %d", i+1, d.ID, d.Recoveries, m.ID, i)
		}
		// Not settled: the lease runs out, as when the worker is killed.
	}
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	ExpectNone(t, c, 3*time.Second)

	recs := discardRecords(t, e, q)
	if len(recs) != 1 {
		t.Fatalf("discard key holds %d records after %d lease expiries, want 1", len(recs), broker.DefaultMaxRecoveries)
	}
	if !strings.HasPrefix(recs[0].Reason, broker.PoisonReason) {
		t.Errorf("discard reason %q, want it to start with %q", recs[0].Reason, broker.PoisonReason)
	}
	var got broker.Message
	if _, err := codec.Decode(recs[0].Message, &got); err != nil {
		t.Fatalf("discarded message does not decode: %v", err)
	}
	if got.ID != m.ID || got.Recoveries != broker.DefaultMaxRecoveries || got.Retries != 0 {
		t.Errorf("discarded %s with Recoveries %d, Retries %d; want %s, %d, 0", got.ID, got.Recoveries, got.Retries, m.ID, broker.DefaultMaxRecoveries)
	}
}

// testRecoveredInBatches: messages whose leases ran out together (their
// worker died holding them) come back together, in one fetch, while one
// more expiry would not make them poison; once it would (their last
// chance, Delivery.LastChance), each comes alone, so that a poison message
// among them dies alone.
func testRecoveredInBatches(t *testing.T, e *env) {
	const q = "victims"
	const n = 3
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
	}
	Enqueue(t, e.d, msgs...)
	opts := &broker.ConsumerOptions{VisibilityTimeout: shortLease}
	// A new consumer each round, as a restarted worker would be; nothing is
	// settled, as when the worker is killed.
	for round := range broker.DefaultMaxRecoveries - 1 {
		c := Open(t, e.d, q, opts)
		ds := Fetch(t, c, n, 10*time.Second)
		if split(e.d, q) && len(ds) < n {
			// Each partition's leases run out on their own: the fetch
			// takes those that have.
			ds = append(ds, FetchN(t, c, n-len(ds), n, 10*time.Second)...)
		}
		if len(ds) != n {
			t.Fatalf("round %d: one fetch returned %v, want all %d messages", round, IDs(ds), n)
		}
		for _, d := range ds {
			if d.Recoveries != round || d.LastChance {
				t.Fatalf("round %d: %s with Recoveries %d, LastChance %v; want %d, false", round, d.ID, d.Recoveries, d.LastChance, round)
			}
		}
	}
	// Their last chance: one at a time.
	c := Open(t, e.d, q, opts)
	seen := map[string]bool{}
	for range n {
		ds := Fetch(t, c, n, 10*time.Second)
		if len(ds) != 1 {
			t.Fatalf("on their last chance: a fetch returned %v, want one message alone", IDs(ds))
		}
		d := ds[0]
		if d.Recoveries != broker.DefaultMaxRecoveries-1 || !d.LastChance || seen[d.ID] {
			t.Fatalf("last chance: %s with Recoveries %d, LastChance %v (seen before: %v)", d.ID, d.Recoveries, d.LastChance, seen[d.ID])
		}
		seen[d.ID] = true
		if err := c.Ack(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
}
