package brokertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// testSleep proves a consumer that implements broker.Sleeper sleeps on an
// empty queue (kept: until a job comes), wakes when a job is stored,
// leases nothing (the job stays ready and the next Fetch gets it), and
// returns ctx.Err() for a done context and broker.ErrClosed once closed.
func testSleep(t *testing.T, e *env) {
	const q = "sleep"
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, &broker.ConsumerOptions{Kept: true})
	s, ok := c.(broker.Sleeper)
	if !ok {
		t.Skipf("the consumer (%T) does not implement broker.Sleeper", c)
	}
	ExpectNone(t, c, 100*time.Millisecond) // a caller sleeps after a Fetch found nothing

	slept := make(chan error, 1)
	go func() { slept <- s.Sleep(ctx) }()
	select {
	case err := <-slept:
		t.Fatalf("Sleep on an empty queue returned %v before any job came", err)
	case <-time.After(300 * time.Millisecond):
	}
	m := NewMessage(q, 1)
	Enqueue(t, e.d, m)
	select {
	case err := <-slept:
		if err != nil {
			t.Fatalf("Sleep woken by a job: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Sleep did not return within 5s of a job being stored")
	}
	if x, ok := e.d.(broker.Inspector); ok {
		if got := sizesOf(t, x, q); got.Ready != 1 || got.InFlight != 0 {
			t.Fatalf("after Sleep: ready %d, in flight %d; want 1 and 0 (Sleep leases nothing)", got.Ready, got.InFlight)
		}
	}
	d := FetchOne(t, c, 5*time.Second)
	if d.ID != m.ID {
		t.Fatalf("Fetch after Sleep got %s, want %s", d.ID, m.ID)
	}
	if err := c.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Sleep(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with a done context = %v, want context.Canceled", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Sleep(ctx); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Sleep after Close = %v, want broker.ErrClosed", err)
	}
}
