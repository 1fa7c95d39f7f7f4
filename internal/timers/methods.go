package timers

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// Methods implements broker.Timers for a driver that keeps its timers in
// this package's layout. A driver embeds it, so the methods are written once
// for the list and the stream driver.
type Methods struct {
	// Name starts every error ("list", "stream").
	Name string
	// Client is the driver's Redis client.
	Client redis.UniversalClient
	// Keys returns a queue's timer keys and where its timers are promoted to.
	Keys func(queue string) (Keys, Target)
	// Stored returns the stored form of a message waiting in the queue.
	Stored func(m *broker.Message, now time.Time) []byte
}

var (
	_ broker.Timers     = (*Methods)(nil)
	_ broker.CronLister = (*Methods)(nil)
)

func (x *Methods) keys(queue string) (Keys, Target, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return Keys{}, Target{}, fmt.Errorf("%s: %w", x.Name, err)
	}
	k, t := x.Keys(queue)
	return k, t, nil
}

func (x *Methods) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", x.Name, err)
}

// Promote moves up to max due timers of queue to its ready structure,
// earliest first, exactly once however many promoters run.
func (x *Methods) Promote(ctx context.Context, queue string, max int) (broker.Promotion, error) {
	k, t, err := x.keys(queue)
	if err != nil {
		return broker.Promotion{}, err
	}
	p, err := Promote(ctx, x.Client, k, t, max)
	return p, x.wrap(err)
}

// Cancel removes the pending timer id of queue and reports whether it was
// pending.
func (x *Methods) Cancel(ctx context.Context, queue, id string) (bool, error) {
	k, t, err := x.keys(queue)
	if err != nil {
		return false, err
	}
	ok, err := Cancel(ctx, x.Client, k, t, id)
	return ok, x.wrap(err)
}

// Reschedule moves the pending timer id of queue to at and reports whether
// it was pending.
func (x *Methods) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	k, _, err := x.keys(queue)
	if err != nil {
		return false, err
	}
	ok, err := Reschedule(ctx, x.Client, k, id, at)
	return ok, x.wrap(err)
}

// PendingTimers returns a page of queue's pending timers, earliest first.
func (x *Methods) PendingTimers(ctx context.Context, queue string, offset, limit int) ([]*broker.Message, int64, error) {
	k, _, err := x.keys(queue)
	if err != nil {
		return nil, 0, err
	}
	ms, n, err := Pending(ctx, x.Client, k, offset, limit)
	return ms, n, x.wrap(err)
}

// WatchTimers subscribes to queue's timer wake-ups.
func (x *Methods) WatchTimers(ctx context.Context, queue string) (<-chan struct{}, error) {
	k, _, err := x.keys(queue)
	if err != nil {
		return nil, err
	}
	ch, err := Watch(ctx, x.Client, k)
	return ch, x.wrap(err)
}

// EnqueueFire stores a cron fire once per series and fire time.
func (x *Methods) EnqueueFire(ctx context.Context, series string, m *broker.Message, keep time.Duration) (bool, error) {
	if err := broker.ValidateMessage(m); err != nil {
		return false, fmt.Errorf("%s: fire: %w", x.Name, err)
	}
	k, _, err := x.keys(m.Queue)
	if err != nil {
		return false, err
	}
	ok, err := Fire(ctx, x.Client, k, series, m, x.Stored(m, time.Now()), keep)
	return ok, x.wrap(err)
}

// LastFire returns the last fire time series recorded in queue.
func (x *Methods) LastFire(ctx context.Context, queue, series string) (time.Time, bool, error) {
	k, _, err := x.keys(queue)
	if err != nil {
		return time.Time{}, false, err
	}
	at, ok, err := LastFire(ctx, x.Client, k, series)
	return at, ok, x.wrap(err)
}

// CronSeries returns the cron series of queue whose last-fire records
// Redis holds, sorted by name, at most broker.MaxCronSeries.
func (x *Methods) CronSeries(ctx context.Context, queue string) ([]broker.CronSeries, error) {
	k, _, err := x.keys(queue)
	if err != nil {
		return nil, err
	}
	s, err := ListSeries(ctx, x.Client, k)
	return s, x.wrap(err)
}
