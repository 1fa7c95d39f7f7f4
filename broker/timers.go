package broker

import (
	"context"
	"time"
)

// Timers is the delay side of a driver whose Capabilities has Delay: the
// messages enqueued with a RunAt after now wait, under their ID, in the
// queue's timer set until a promoter moves them to the ready structure.
// Package delay runs promoters and builds cancel, reschedule and cron on
// this interface; worker.Pool runs a promoter for its queue.
//
// A timer's ID is the message ID, so a caller-chosen ID is a business key
// ("order:123:timeout"): while a timer is pending under an ID, enqueueing
// another delayed message with that ID in the same queue fails with a
// *DuplicateError, and Cancel and Reschedule find it by that ID.
type Timers interface {
	// Promote moves up to max timers of queue that are due (by the server's
	// clock) to the ready structure, earliest first, each exactly once
	// however many promoters run. It reports how many it moved and how
	// long until the next timer is due.
	Promote(ctx context.Context, queue string, max int) (Promotion, error)
	// Cancel removes the pending timer id of queue. It reports whether the
	// timer was still pending: for any timer exactly one of Cancel and
	// promotion wins.
	Cancel(ctx context.Context, queue, id string) (bool, error)
	// Reschedule moves the pending timer id of queue to at (now or earlier:
	// due at once). It reports whether the timer was still pending.
	Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error)
	// PendingTimers returns up to limit pending timers of queue from
	// position offset on, ordered by due time (each message's RunAt), and
	// how many are pending.
	PendingTimers(ctx context.Context, queue string, offset, limit int) ([]*Message, int64, error)
	// WatchTimers returns a channel that receives a value whenever a timer
	// of queue is added or moved ahead of the earliest one, so that a
	// promoter sleeping until the next due time wakes early. Wake-ups may be
	// lost (a reconnection); a promoter bounds its sleep. The channel is
	// closed when ctx ends.
	WatchTimers(ctx context.Context, queue string) (<-chan struct{}, error)
	// EnqueueFire stores msg as a timer due at msg.RunAt (in the past: due
	// at once) unless series (a cron spec's name) already stored a fire at
	// msg.RunAt or later, and records msg.RunAt as the series' last fire in
	// the same atomic step; the record lives for keep after that. It
	// reports whether msg was stored: of any number of instances firing the
	// same series at the same time, exactly one stores it. A fire more than
	// a minute ahead of the server's clock is refused with an error (its
	// instance's clock runs ahead).
	EnqueueFire(ctx context.Context, series string, msg *Message, keep time.Duration) (bool, error)
	// LastFire returns the last fire time series recorded in queue; ok is
	// false when there is none (never fired, or its record expired).
	LastFire(ctx context.Context, queue, series string) (at time.Time, ok bool, err error)
}

// Promotion is the outcome of one Timers.Promote call.
type Promotion struct {
	// Promoted is how many timers moved to the ready structure.
	Promoted int
	// Next is how long until the next pending timer is due by the server's
	// clock (0: due now, more may be promoted at once); negative when no
	// timer is pending.
	Next time.Duration
	// Late is how late, by the server's clock, the earliest timer the call
	// promoted was past its due time; 0 when it promoted none.
	Late time.Duration
}

// MaxCronSeries caps the series one CronLister.CronSeries call returns.
const MaxCronSeries = 1000

// CronLister is the side of a driver with Timers that lists the cron
// series of a queue. Redis holds no spec, only each series' record of its
// latest stored fire (the one EnqueueFire writes and LastFire reads), and
// this lists those records; the apps hold the specs. Optional: a driver
// with Timers may lack it.
type CronLister interface {
	// CronSeries returns the series of queue whose last-fire records
	// Redis holds, each with its last fire, sorted by name: a series is
	// listed from its first fire stored until its record expires (keep
	// after its latest). At most MaxCronSeries, those whose records expire
	// last when the queue has more.
	CronSeries(ctx context.Context, queue string) ([]CronSeries, error)
}

// CronSeries is one cron series of a queue (CronLister).
type CronSeries struct {
	// Name is the series' name (delay.CronEntry's Name).
	Name string `json:"name"`
	// LastFire is the time of the latest fire stored, pending or not.
	LastFire time.Time `json:"last_fire"`
}
