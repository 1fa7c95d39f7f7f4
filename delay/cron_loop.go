package delay

import (
	"context"
	"log/slog"
	"maps"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// Backoff of the retries after a Redis error. Real time, whatever the
// Clock: it paces round trips to a struggling server.
const (
	cronBackoffMin = 10 * time.Millisecond
	cronBackoffMax = time.Second
)

// loop enqueues e's fires until ctx ends. It learns where the series stands
// from its last-fire record (sync), then stores each fire Lookahead before
// its time. It needs no lock or leader: the fire script refuses a fire the
// series already has (the same time or a later one), so any number of
// loops may try the same fire and one stores it.
func (c *Cron) loop(ctx context.Context, e *cronEntry) {
	var (
		next     time.Time
		ok       bool
		fromSync bool // store next however late: sync chose a fire already due
	)
	resync := func() {
		next, ok = c.sync(ctx, e)
		fromSync = ok && !next.After(c.cfg.Clock.Now())
	}
	resync()
	backoff := time.Duration(0)
	for ok && ctx.Err() == nil {
		if c.cfg.Clock.WaitUntil(ctx, next.Add(-c.cfg.Lookahead)) != nil {
			return
		}
		if !fromSync && !next.After(c.cfg.Clock.Now().Add(-c.cfg.Lookahead)) {
			// This loop stalled past the fire's lookahead (a paused
			// process, a slow Redis): other instances may have moved on, or
			// the fire was missed. Ask the record, apply the policy.
			resync()
			continue
		}
		stored, err := c.fire(ctx, e, next)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.stats.errors.Add(1)
			backoff = min(max(2*backoff, cronBackoffMin), cronBackoffMax)
			c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "delay: cron: enqueueing a fire failed; retrying",
				slog.String("cron", e.Name), slog.String("queue", e.Queue), slog.Time("fire", next),
				slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
			if sleep(ctx, backoff) != nil {
				return
			}
			// The script may have run with its reply lost: the record says.
			resync()
			continue
		}
		backoff = 0
		if stored {
			c.stats.stored.Add(1)
		} else {
			c.stats.refused.Add(1)
		}
		fromSync = false
		next, ok = c.nextFire(ctx, e, next)
	}
}

// sync reads the series' last-fire record and returns the fire to store
// next, with the Missed policy applied; ok is false when ctx ended or the
// schedule broke. Redis errors are retried until ctx ends.
//
//   - no record (a new series, or one idle longer than the record lives):
//     the first fire after now;
//   - the first fire after the record is still ahead: that one;
//   - it has passed: MissedRunLatest returns the latest fire at or before
//     now (stored at once); MissedSkip the first fire after now minus
//     Lookahead (a fire that recent is late, not missed).
func (c *Cron) sync(ctx context.Context, e *cronEntry) (time.Time, bool) {
	backoff := time.Duration(0)
	for {
		last, found, err := c.t.LastFire(ctx, e.Queue, e.Name)
		if err == nil {
			return c.resume(ctx, e, last, found)
		}
		if ctx.Err() != nil {
			return time.Time{}, false
		}
		c.stats.errors.Add(1)
		backoff = min(max(2*backoff, cronBackoffMin), cronBackoffMax)
		c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "delay: cron: reading the last fire failed; retrying",
			slog.String("cron", e.Name), slog.String("queue", e.Queue),
			slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
		if sleep(ctx, backoff) != nil {
			return time.Time{}, false
		}
	}
}

// resume applies the rules of sync to the record (last, found).
func (c *Cron) resume(ctx context.Context, e *cronEntry, last time.Time, found bool) (time.Time, bool) {
	now := c.cfg.Clock.Now()
	if !found {
		return c.nextFire(ctx, e, now)
	}
	first, ok := c.nextFire(ctx, e, last)
	if !ok || first.After(now) {
		return first, ok
	}
	var (
		next time.Time
		err  error
	)
	switch c.cfg.Missed {
	case MissedSkip:
		late := now.Add(-c.cfg.Lookahead)
		if first.After(late) {
			return first, true // late, not missed
		}
		next, err = e.sched.next(late)
	default:
		next, err = e.sched.latest(last, now)
	}
	if err != nil {
		c.broken(ctx, e, last, err)
		return time.Time{}, false
	}
	c.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "delay: cron: fires were missed",
		slog.String("cron", e.Name), slog.String("queue", e.Queue), slog.String("policy", c.cfg.Missed.String()),
		slog.Time("last_fire", last), slog.Time("first_missed", first), slog.Time("next_fire", next))
	return next, true
}

// nextFire returns the first fire of e after t; ok is false when the
// schedule broke (logged).
func (c *Cron) nextFire(ctx context.Context, e *cronEntry, t time.Time) (time.Time, bool) {
	n, err := e.sched.next(t)
	if err != nil {
		c.broken(ctx, e, t, err)
		return time.Time{}, false
	}
	return n, true
}

// broken logs a schedule that cannot say its next fire. Add checked the
// spec, so this is robfig/cron failing later (a panic, or no fire within
// its five-year search); the entry stops firing in this Run.
func (c *Cron) broken(ctx context.Context, e *cronEntry, after time.Time, err error) {
	c.cfg.Logger.LogAttrs(ctx, slog.LevelError, "delay: cron: no next fire; the entry stops until Run starts again",
		slog.String("cron", e.Name), slog.String("spec", e.Spec), slog.Time("after", after), slog.String("error", err.Error()))
}

// fire stores the fire of e at at, unless the series has it already.
func (c *Cron) fire(ctx context.Context, e *cronEntry, at time.Time) (bool, error) {
	h := make(map[string]string, len(e.Headers)+2)
	maps.Copy(h, e.Headers)
	h[HeaderCronName] = e.Name
	h[HeaderCronFire] = at.Format(time.RFC3339)
	h[conveyor.HeaderRunAt] = strconv.FormatInt(at.UnixMilli(), 10)
	m := &broker.Message{
		ID: FireID(e.Name, at), Kind: e.Kind, Queue: e.Queue, Payload: e.payload, Headers: h,
		MaxAttempts: e.MaxAttempts, Timeout: e.Timeout, EnqueuedAt: c.cfg.Clock.Now(), RunAt: at,
	}
	return c.t.EnqueueFire(ctx, e.Name, m, e.keep(at))
}

// keep is how long the record of a fire at at lives: a week, or three gaps
// to the next fire when that is longer, so that a running series never
// loses it and a series whose instances were all down for up to that long
// still finds it (and applies Missed).
func (e *cronEntry) keep(at time.Time) time.Duration {
	n, err := e.sched.next(at)
	if err != nil {
		return cronKeepMin
	}
	return max(cronKeepMin, 3*n.Sub(at))
}

// sleep waits d of real time, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
