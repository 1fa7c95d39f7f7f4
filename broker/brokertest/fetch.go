package brokertest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// Promptness bounds. They are generous (the race detector and a loaded
// two-core machine slow everything) yet far below what a polling loop with a
// sleep of a second would show.
const (
	// cancelBound: how soon Fetch must return once its context is done.
	cancelBound = 500 * time.Millisecond
	// wakeBound: how soon a blocked Fetch must return once a message is
	// enqueued.
	wakeBound = time.Second
)

// testFetchCancel proves a Fetch blocked on an empty queue returns the
// context's error promptly on cancel and on deadline, not before, and that
// the consumer still works afterwards.
func testFetchCancel(t *testing.T, e *env) {
	const q = "cancel"
	c := Open(t, e.d, q, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelledAt atomic.Int64
	timer := time.AfterFunc(200*time.Millisecond, func() {
		cancelledAt.Store(time.Now().UnixNano())
		cancel()
	})
	defer timer.Stop()
	ds, err := c.Fetch(ctx, 10)
	returned := time.Now()
	if !errors.Is(err, context.Canceled) || len(ds) != 0 {
		t.Fatalf("Fetch on an empty queue after cancel = %d deliveries, %v; want none, context.Canceled", len(ds), err)
	}
	at := cancelledAt.Load()
	if at == 0 {
		t.Fatal("Fetch returned before its context was cancelled")
	}
	if late := returned.Sub(time.Unix(0, at)); late > cancelBound {
		t.Errorf("Fetch returned %v after cancel, want within %v", late, cancelBound)
	}

	const deadline = 200 * time.Millisecond
	dctx, dcancel := context.WithTimeout(context.Background(), deadline)
	defer dcancel()
	start := time.Now()
	ds, err = c.Fetch(dctx, 10)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || len(ds) != 0 {
		t.Fatalf("Fetch on an empty queue past its deadline = %d deliveries, %v; want none, context.DeadlineExceeded", len(ds), err)
	}
	if took < deadline-clockSlack || took > deadline+cancelBound {
		t.Errorf("Fetch with a %v deadline returned after %v, want %v to %v", deadline, took, deadline, deadline+cancelBound)
	}

	// An interrupted Fetch must not break the consumer.
	m := NewMessage(q, 1)
	Enqueue(t, e.d, m)
	if d := FetchOne(t, c, 5*time.Second); d.ID != m.ID {
		t.Fatalf("fetched %s after cancellations, want %s", d.ID, m.ID)
	} else if err := c.Ack(Context(t, 5*time.Second), d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

// testFetchWakes proves a Fetch blocked on an empty queue returns a message
// enqueued by another goroutine, as soon as it is enqueued.
func testFetchWakes(t *testing.T, e *env) {
	const q = "wakes"
	c := Open(t, e.d, q, nil)
	m := NewMessage(q, 1)

	type result struct {
		ds  []*broker.Delivery
		err error
		at  time.Time
	}
	fetched := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ds, err := c.Fetch(ctx, 10)
		fetched <- result{ds, err, time.Now()}
	}()

	// Enqueue a little later from another goroutine, so the Fetch is most
	// likely blocked by then (the test holds either way).
	enqueued := make(chan error, 1)
	var enqueuedAt atomic.Int64
	timer := time.AfterFunc(100*time.Millisecond, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := e.d.Enqueue(ctx, []*broker.Message{m})
		enqueuedAt.Store(time.Now().UnixNano())
		enqueued <- err
	})
	defer timer.Stop()

	r := <-fetched
	if err := <-enqueued; err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if r.err != nil {
		t.Fatalf("blocked Fetch: %v", r.err)
	}
	if len(r.ds) != 1 || r.ds[0] == nil || r.ds[0].ID != m.ID {
		t.Fatalf("blocked Fetch returned %d deliveries, want %s", len(r.ds), m.ID)
	}
	if lag := r.at.Sub(time.Unix(0, enqueuedAt.Load())); lag > wakeBound {
		t.Errorf("blocked Fetch returned %v after Enqueue, want within %v", lag, wakeBound)
	} else {
		t.Logf("blocked Fetch returned %v after Enqueue returned", lag)
	}
	if err := c.Ack(Context(t, 5*time.Second), r.ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

// testFetchAfterClose proves a closed consumer refuses to fetch with
// broker.ErrClosed instead of blocking or panicking.
func testFetchAfterClose(t *testing.T, e *env) {
	c := Open(t, e.d, "closed", nil)
	if err := c.Close(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ds, err := c.Fetch(Context(t, 5*time.Second), 10)
	if !errors.Is(err, broker.ErrClosed) || len(ds) != 0 {
		t.Fatalf("Fetch after Close = %d deliveries, %v; want none, broker.ErrClosed", len(ds), err)
	}
}
