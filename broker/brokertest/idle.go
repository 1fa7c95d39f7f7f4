package brokertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// idleBound: how soon a Fetch on an empty queue must call
// ConsumerOptions.Idle, and how long a test waits for a Fetch that Idle
// showed waiting to return once it has something.
const idleBound = 5 * time.Second

// idleSignal returns ConsumerOptions whose Idle signals on the channel
// returned (a non-blocking send: calls while a signal is pending merge).
func idleSignal() (*broker.ConsumerOptions, chan struct{}) {
	idled := make(chan struct{}, 1)
	return &broker.ConsumerOptions{Idle: func() {
		select {
		case idled <- struct{}{}:
		default:
		}
	}}, idled
}

// fetchResult is what a Fetch run in the background returned.
type fetchResult struct {
	ds  []*broker.Delivery
	err error
}

// fetchInBackground runs c.Fetch(ctx, max) in a goroutine and returns its
// result on the channel.
func fetchInBackground(ctx context.Context, c broker.Consumer, max int) <-chan fetchResult {
	res := make(chan fetchResult, 1)
	go func() {
		ds, err := c.Fetch(ctx, max)
		res <- fetchResult{ds, err}
	}()
	return res
}

// awaitIdle fails t unless idled signals within idleBound while res, the
// Fetch that should call Idle, has not returned.
func awaitIdle(t *testing.T, what string, idled <-chan struct{}, res <-chan fetchResult) {
	t.Helper()
	timer := time.NewTimer(idleBound)
	defer timer.Stop()
	select {
	case <-idled:
	case r := <-res:
		t.Fatalf("Fetch on %s returned %v, %v before it called Idle", what, IDs(r.ds), r.err)
	case <-timer.C:
		t.Fatalf("Fetch on %s did not call Idle within %v", what, idleBound)
	}
}

// awaitFetched fails t unless res, a Fetch shown waiting by Idle, returns
// exactly m within idleBound.
func awaitFetched(t *testing.T, res <-chan fetchResult, m *broker.Message) []*broker.Delivery {
	t.Helper()
	timer := time.NewTimer(idleBound)
	defer timer.Stop()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("the waiting Fetch: %v", r.err)
		}
		if len(r.ds) != 1 || r.ds[0] == nil || r.ds[0].ID != m.ID {
			t.Fatalf("the waiting Fetch returned %v, want [%s]", IDs(r.ds), m.ID)
		}
		return r.ds
	case <-timer.C:
		t.Fatalf("the waiting Fetch did not return %s within %v", m.ID, idleBound)
	}
	return nil
}

// testFetchIdle proves a Fetch calls ConsumerOptions.Idle before it waits
// on an empty queue (and, with Pause, on a paused one) and still returns
// the message that ends the wait, and that a Fetch with messages ready
// returns them without calling Idle.
func testFetchIdle(t *testing.T, e *env) {
	const q = "idle"
	opts, idled := idleSignal()
	c := Open(t, e.d, q, opts)
	res := fetchInBackground(Context(t, 30*time.Second), c, 10)
	// Idle shows the Fetch waiting, so the message comes after it looked
	// (and a fan-out consumer is subscribed: Open returned).
	awaitIdle(t, "an empty queue", idled, res)
	m := NewMessage(q, 1)
	Enqueue(t, e.d, m)
	ds := awaitFetched(t, res, m)
	if err := c.Ack(Context(t, 5*time.Second), ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}

	if e.caps.AtLeastOnce {
		// A new consumer: one whose last Fetch emptied the queue may wait
		// for the queue's wake-up before it looks again, and calls Idle for
		// that wait. (Without AtLeastOnce a message enqueued may still be on
		// its way to the consumer when Fetch looks.)
		opts, idled := idleSignal()
		ready := Open(t, e.d, q, opts)
		want := []*broker.Message{NewMessage(q, 2), NewMessage(q, 3), NewMessage(q, 4)}
		Enqueue(t, e.d, want...)
		var got []string
		for len(got) < len(want) {
			ds := Fetch(t, ready, len(want)-len(got), idleBound)
			select {
			case <-idled:
				t.Fatalf("Fetch with %d messages ready called Idle (it returned %v)", len(want)-len(got), IDs(ds))
			default:
			}
			got = append(got, IDs(ds)...)
			if err := ready.Ack(Context(t, 5*time.Second), ds...); err != nil {
				t.Fatalf("Ack: %v", err)
			}
		}
		slices.Sort(got)
		if wantIDs := []string{want[0].ID, want[1].ID, want[2].ID}; !slices.Equal(got, wantIDs) {
			t.Fatalf("fetched %v, want %v", got, wantIDs)
		}
	}

	if e.caps.Pause {
		p, ok := e.d.(broker.Pauser)
		if !ok {
			t.Fatalf("driver %T has Capabilities.Pause but does not implement broker.Pauser", e.d)
		}
		const pq = "idle-paused"
		opts, idled := idleSignal()
		c := Open(t, e.d, pq, opts)
		ctx := Context(t, 30*time.Second)
		if err := p.PauseQueue(ctx, pq); err != nil {
			t.Fatal(err)
		}
		m := NewMessage(pq, 1)
		Enqueue(t, e.d, m)
		res := fetchInBackground(ctx, c, 10)
		// The message is ready: only the pause makes this Fetch wait.
		awaitIdle(t, "a paused queue with a message ready", idled, res)
		if err := p.ResumeQueue(ctx, pq); err != nil {
			t.Fatal(err)
		}
		ds := awaitFetched(t, res, m)
		if err := c.Ack(ctx, ds...); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
}
