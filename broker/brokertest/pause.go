package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// testPause: a paused queue accepts enqueues but no Fetch returns its
// messages, also a Fetch that was blocked on the empty queue when the pause
// came, and a consumer opened after it; the state is read back; resume
// delivers everything, and leaves no key behind.
func testPause(t *testing.T, e *env) {
	p, ok := e.d.(broker.Pauser)
	if !ok {
		t.Fatalf("driver %T has Capabilities.Pause but does not implement broker.Pauser", e.d)
	}
	ctx := context.Background()
	blocked := Open(t, e.d, "q", nil)
	// A Fetch blocked on the empty queue before the pause.
	type result struct {
		ds  []*broker.Delivery
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		ds, err := blocked.Fetch(fctx, 10)
		res <- result{ds, err, time.Now()}
	}()

	if err := p.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	if paused, err := p.QueuePaused(ctx, "q"); err != nil || !paused {
		t.Fatalf("QueuePaused after PauseQueue: %v, %v", paused, err)
	}
	if paused, err := p.QueuePaused(ctx, "other"); err != nil || paused {
		t.Fatalf("QueuePaused of a queue never paused: %v, %v", paused, err)
	}
	Enqueue(t, e.d, NewMessage("q", 1), NewMessage("q", 2))
	later := Open(t, e.d, "q", nil) // opened after the pause: it never fetches
	ExpectNone(t, later, 3*broker.PauseLag)
	// The consumer blocked before the pause may have acted on what it knew
	// for broker.PauseLag, not longer.
	var got []*broker.Delivery
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("the Fetch blocked before the pause: %v", r.err)
		}
		if late := r.at.Sub(pausedAt); late > broker.PauseLag+cancelBound && len(r.ds) > 0 {
			t.Fatalf("a Fetch blocked before the pause returned %v %v after it", IDs(r.ds), late)
		}
		got = r.ds
	default:
	}

	if err := p.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if paused, err := p.QueuePaused(ctx, "q"); err != nil || paused {
		t.Fatalf("QueuePaused after ResumeQueue: %v, %v", paused, err)
	}
	if got == nil {
		select {
		case r := <-res:
			if r.err != nil {
				t.Fatalf("the blocked Fetch after resume: %v", r.err)
			}
			got = r.ds
		case <-time.After(10 * time.Second):
			t.Fatal("the blocked Fetch returned nothing within 10s of the resume")
		}
	}
	if len(got) < 2 {
		got = append(got, FetchN(t, later, 2-len(got), 10, 10*time.Second)...)
	}
	if len(got) != 2 {
		t.Fatalf("after resume: %v, want both messages", IDs(got))
	}
	if e.caps.AtLeastOnce {
		// Deliveries of either consumer: each is settled by its own.
		for _, d := range got {
			if err := blocked.Ack(ctx, d); err != nil {
				if err := later.Ack(ctx, d); err != nil {
					t.Fatalf("ack after resume: %v", err)
				}
			}
		}
	}
	AssertNoKeys(t, e.prefix)
}
