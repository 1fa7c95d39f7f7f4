package delay

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// Timers cancels, moves and lists the pending timers of a driver's queues.
// A timer is a job enqueued with a delay or run-at (conveyor.Client's
// Enqueue with EnqueueOptions.Delay or RunAt); its ID, when the caller
// chose it, is the business key ("order:123:timeout").
type Timers struct {
	t broker.Timers
}

// NewTimers returns the timers of d. It fails with broker.ErrUnsupported
// when d has none (the pubsub driver).
func NewTimers(d broker.Driver) (*Timers, error) {
	t, err := timersOf(d)
	if err != nil {
		return nil, err
	}
	return &Timers{t: t}, nil
}

// Cancel removes the pending timer id of queue. It reports whether the
// timer was still pending: true means the job will not run (the promoter
// cannot move it any more); false means it was already promoted (it is
// queued, running or done) or never existed. For any timer exactly one of
// Cancel and the promoter wins.
func (t *Timers) Cancel(ctx context.Context, queue, id string) (bool, error) {
	ok, err := t.t.Cancel(ctx, queue, id)
	if err != nil {
		return false, fmt.Errorf("delay: %w", err)
	}
	return ok, nil
}

// Reschedule moves the pending timer id of queue to at (now or earlier:
// due at once) and reports whether it was still pending.
func (t *Timers) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	ok, err := t.t.Reschedule(ctx, queue, id, at)
	if err != nil {
		return false, fmt.Errorf("delay: %w", err)
	}
	return ok, nil
}

// Page is one page of pending timers.
type Page struct {
	// Timers are the page's timers, earliest first; each message's RunAt is
	// its due time.
	Timers []*broker.Message
	// Total is how many timers the queue had pending when the page was read.
	Total int64
	// Next is the offset of the next page, or -1 after the last page.
	Next int
}

// ListOptions select a page of List. A nil *ListOptions is the first page
// of 100.
type ListOptions struct {
	// Offset is the position of the first timer, 0 being the earliest.
	Offset int
	// Limit is the page size, 1 to 1000. Defaults to 100.
	Limit int
}

// List returns a page of the pending timers of queue, earliest first.
// Pages are positions in the due-time order, so a timer promoted or added
// between two calls shifts the positions after it.
func (t *Timers) List(ctx context.Context, queue string, opts *ListOptions) (Page, error) {
	o := ListOptions{Limit: 100}
	if opts != nil {
		o = *opts
		if o.Limit == 0 {
			o.Limit = 100
		}
	}
	if o.Offset < 0 || o.Limit < 0 || o.Limit > 1000 {
		return Page{}, fmt.Errorf("delay: list: offset %d, limit %d: want offset >= 0 and limit 1 to 1000", o.Offset, o.Limit)
	}
	ms, total, err := t.t.PendingTimers(ctx, queue, o.Offset, o.Limit)
	if err != nil {
		return Page{}, fmt.Errorf("delay: %w", err)
	}
	p := Page{Timers: ms, Total: total, Next: -1}
	if next := o.Offset + o.Limit; int64(next) < total {
		p.Next = next
	}
	return p, nil
}
