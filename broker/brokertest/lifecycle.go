package brokertest

import (
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// testNoKeysLeft proves a driver leaves no key behind once every message of
// a run (including a retried, a delayed-retried and a released one) is acked
// and its consumers are closed: no leaked leases, counters or empty
// structures.
func testNoKeysLeft(t *testing.T, e *env) {
	const q, n = "nokeys", 6
	c := Open(t, e.d, q, nil)
	if e.caps.Delay {
		Promote(t, e.d, q)
	}
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
	}
	Enqueue(t, e.d, msgs...)
	ctx := Context(t, 30*time.Second)

	ds := FetchN(t, c, n, n, 5*time.Second)
	var ack []*broker.Delivery
	back := 0
	for i, d := range ds {
		switch {
		case i == 0 && e.caps.AtLeastOnce:
			if err := c.Retry(ctx, d, time.Now()); err != nil {
				t.Fatalf("Retry: %v", err)
			}
			back++
		case i == 1 && e.caps.AtLeastOnce:
			if err := c.Release(ctx, d); err != nil {
				t.Fatalf("Release: %v", err)
			}
			back++
		case i == 2 && e.caps.AtLeastOnce && e.caps.Delay:
			if err := c.Retry(ctx, d, time.Now().Add(200*time.Millisecond)); err != nil {
				t.Fatalf("Retry(at): %v", err)
			}
			back++
		default:
			ack = append(ack, d)
		}
	}
	if back > 0 {
		ack = append(ack, FetchN(t, c, back, n, 5*time.Second)...)
	}
	if err := c.Ack(ctx, ack...); err != nil {
		t.Fatalf("Ack of %d: %v", len(ack), err)
	}
	ExpectNone(t, c, 200*time.Millisecond)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	AssertNoKeys(t, e.prefix)
}

// testUnsupported proves a driver refuses, with broker.ErrUnsupported, what
// its Capabilities say it cannot do, rather than pretending to.
func testUnsupported(t *testing.T, e *env) {
	const q = "unsupported"
	ctx := Context(t, 30*time.Second)
	if !e.caps.Delay {
		m := NewMessage(q, 1)
		m.RunAt = time.Now().Add(time.Hour)
		if err := e.d.Enqueue(ctx, []*broker.Message{m}); !errors.Is(err, broker.ErrUnsupported) {
			t.Errorf("Enqueue with RunAt ahead on a driver without Delay: %v, want broker.ErrUnsupported", err)
		}
		AssertNoKeys(t, e.prefix)
	}
	c := Open(t, e.d, q, nil)
	Enqueue(t, e.d, NewMessage(q, 2))
	d := FetchOne(t, c, 5*time.Second)
	if !e.caps.AtLeastOnce {
		if err := c.Retry(ctx, d, time.Now()); !errors.Is(err, broker.ErrUnsupported) {
			t.Errorf("Retry on a driver without AtLeastOnce: %v, want broker.ErrUnsupported", err)
		}
		if err := c.Postpone(ctx, d, time.Now()); !errors.Is(err, broker.ErrUnsupported) {
			t.Errorf("Postpone on a driver without AtLeastOnce: %v, want broker.ErrUnsupported", err)
		}
	}
	if !e.caps.Discard {
		if err := c.Discard(ctx, d, "x"); !errors.Is(err, broker.ErrUnsupported) {
			t.Errorf("Discard on a driver without Discard: %v, want broker.ErrUnsupported", err)
		}
	}
	if !e.caps.Extend {
		if err := c.Extend(ctx, time.Minute, d); !errors.Is(err, broker.ErrUnsupported) {
			t.Errorf("Extend on a driver without Extend: %v, want broker.ErrUnsupported", err)
		}
	}
	if err := c.Ack(ctx, d); err != nil {
		t.Errorf("Ack after refused operations: %v", err)
	}
}
