package brokertest

import (
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

	recs := discardRecords(t, e.prefix, q)
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
	if got.ID != m.ID || got.Recoveries != broker.DefaultMaxRecoveries || got.Attempt != 0 {
		t.Errorf("discarded %s with Recoveries %d, Attempt %d; want %s, %d, 0", got.ID, got.Recoveries, got.Attempt, m.ID, broker.DefaultMaxRecoveries)
	}
}
