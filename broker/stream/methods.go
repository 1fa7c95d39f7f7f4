package stream

// The methods below are those of the broker interfaces the driver
// implements (broker.Timers, broker.CronLister, broker.Discards,
// broker.Records, broker.Inspector, broker.QueueDeleter,
// broker.WorkerRegistry, broker.Pauser, broker.Limiter), declared here so
// that their documentation is where a user of the driver looks.

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/history"
	"github.com/conveyorq/conveyor/internal/limits"
)

// Cancel removes the pending timer id of queue and reports whether it was
// pending. It implements broker.Timers.
func (d *Driver) Cancel(ctx context.Context, queue, id string) (bool, error) {
	return d.Methods.Cancel(ctx, queue, id)
}

// EnqueueFire stores a cron fire once per series and fire time. It
// implements broker.Timers.
func (d *Driver) EnqueueFire(ctx context.Context, series string, m *broker.Message, keep time.Duration) (bool, error) {
	return d.Methods.EnqueueFire(ctx, series, m, keep)
}

// CronSeries returns the cron series of queue whose last-fire records
// Redis holds, with their last fires, sorted by name: at most
// broker.MaxCronSeries, those whose records expire last when there are
// more. A ZRANGE of the queue's index of series, then one pipeline of a
// GET per series. It implements broker.CronLister.
func (d *Driver) CronSeries(ctx context.Context, queue string) ([]broker.CronSeries, error) {
	return d.Methods.CronSeries(ctx, queue)
}

// LastFire returns the last fire time series recorded in queue. It
// implements broker.Timers.
func (d *Driver) LastFire(ctx context.Context, queue, series string) (time.Time, bool, error) {
	return d.Methods.LastFire(ctx, queue, series)
}

// PendingTimers returns a page of queue's pending timers, earliest first. It
// implements broker.Timers.
func (d *Driver) PendingTimers(ctx context.Context, queue string, offset, limit int) ([]*broker.Message, int64, error) {
	return d.Methods.PendingTimers(ctx, queue, offset, limit)
}

// Promote moves up to max due timers of queue to its ready structure,
// earliest first, exactly once however many promoters run. It implements
// broker.Timers.
func (d *Driver) Promote(ctx context.Context, queue string, max int) (broker.Promotion, error) {
	return d.Methods.Promote(ctx, queue, max)
}

// Reschedule moves the pending timer id of queue to at and reports whether
// it was pending. It implements broker.Timers.
func (d *Driver) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	return d.Methods.Reschedule(ctx, queue, id, at)
}

// WatchTimers subscribes to queue's timer wake-ups. It implements
// broker.Timers.
func (d *Driver) WatchTimers(ctx context.Context, queue string) (<-chan struct{}, error) {
	return d.Methods.WatchTimers(ctx, queue)
}

// DiscardStats returns the figures of queue's discard list after enforcing
// the age limit. It implements broker.Discards.
func (d *Driver) DiscardStats(ctx context.Context, queue string) (broker.DiscardStats, error) {
	return d.Keeper.DiscardStats(ctx, queue)
}

// GetDiscarded returns the newest record of message id in queue, nil when
// there is none. It implements broker.Discards.
func (d *Driver) GetDiscarded(ctx context.Context, queue, id string) (*broker.Discarded, error) {
	return d.Keeper.GetDiscarded(ctx, queue, id)
}

// ListDiscarded returns a page of queue's records, newest first, after
// enforcing the age limit. It implements broker.Discards.
func (d *Driver) ListDiscarded(ctx context.Context, queue string, offset, limit int) ([]*broker.Discarded, int64, error) {
	return d.Keeper.ListDiscarded(ctx, queue, offset, limit)
}

// PurgeDiscarded deletes the records f selects, oldest first, at most max
// (0: all). It implements broker.Discards.
func (d *Driver) PurgeDiscarded(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	return d.Keeper.PurgeDiscarded(ctx, queue, f, max)
}

// Redrive moves the records f selects back to the ready structure, oldest
// first, at most max (0: all), attempt and recoveries reset to 0. It
// implements broker.Discards.
func (d *Driver) Redrive(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	return d.Keeper.Redrive(ctx, queue, f, max)
}

// GetRecord returns the record of finished job id of queue, nil when there
// is none: one script call, O(1) but for a step of retention. It
// implements broker.Records.
func (d *Driver) GetRecord(ctx context.Context, queue, id string) (*broker.JobRecord, error) {
	return d.Records.GetRecord(ctx, queue, id)
}

// ListRecords returns a page of queue's records of finished jobs, the
// latest to expire first, and how many the queue holds: one script call,
// O(log n + offset + limit). It implements broker.Records.
func (d *Driver) ListRecords(ctx context.Context, queue string, offset, limit int) ([]*broker.JobRecord, int64, error) {
	return d.Records.ListRecords(ctx, queue, offset, limit)
}

// RecordStats returns the figures of queue's records of finished jobs (the
// cap is Config.RecordMax): one script call. It implements broker.Records.
func (d *Driver) RecordStats(ctx context.Context, queue string) (broker.RecordStats, error) {
	return d.Records.RecordStats(ctx, queue)
}

// FindJob returns the job id of queue if it is in state, nil if not.
// Delayed: O(1) (the timers HASH). Discarded: the discard list, newest
// first, 1,000 records per call. Finished: O(1) (the records HASH). Ready
// and in flight: a walk, a bounded step of entries per script call. It
// implements broker.Inspector.
func (d *Driver) FindJob(ctx context.Context, queue string, state broker.JobState, id string) (*broker.JobInfo, error) {
	return d.Inspector.FindJob(ctx, queue, state, id)
}

// ListJobs returns a page of queue's jobs in state: delayed earliest due
// first (the timers ZSET), discarded newest first (the discard list),
// finished the latest to expire first (the records), ready and in flight in
// the driver's order (docs/inspector.md). It implements broker.Inspector.
func (d *Driver) ListJobs(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	return d.Inspector.ListJobs(ctx, queue, state, offset, limit)
}

// PurgeDelayed deletes up to max pending timers of queue (0: all it held
// when the call began), earliest due first, a bounded step per script call.
// It implements broker.Inspector.
func (d *Driver) PurgeDelayed(ctx context.Context, queue string, max int) (int, error) {
	return d.Inspector.PurgeDelayed(ctx, queue, max)
}

// PurgeReady deletes up to max ready jobs of queue (0: all it held when the
// call began), next-to-run first, a bounded step per script call. It
// implements broker.Inspector.
func (d *Driver) PurgeReady(ctx context.Context, queue string, max int) (int, error) {
	return d.Inspector.PurgeReady(ctx, queue, max)
}

// QueueSizes returns the sizes and counters of each queue: one script call
// per queue, all in one round trip. It implements broker.Inspector.
func (d *Driver) QueueSizes(ctx context.Context, queues ...string) ([]broker.QueueSizes, error) {
	return d.Inspector.QueueSizes(ctx, queues...)
}

// Queues returns the queues in the registry (<prefix>:queues), sorted: one
// SSCAN per 1,000 queues. It implements broker.Inspector.
func (d *Driver) Queues(ctx context.Context) ([]string, error) {
	return d.Inspector.Queues(ctx)
}

// DeleteQueue deletes queue and reports what it deleted: one script call
// that counts the jobs of each state and DELs every key of the queue whose
// name the driver knows (it refuses with a *broker.InFlightError, deleting
// nothing, while any consumer group of the stream has an entry pending,
// unless force); then SCAN ... MATCH <prefix>:{<queue>}:* (COUNT 1000, a
// round trip each, over the whole database, or the Cluster node of the
// queue's slot) finds the keys whose names hold data (unique keys, cron
// records), DELed a page at a time; last, SREM of its name from the
// registry. It implements broker.QueueDeleter.
func (d *Driver) DeleteQueue(ctx context.Context, queue string, force bool) (broker.QueueDeletion, error) {
	return d.deleter().DeleteQueue(ctx, queue, force)
}

// RegisterWorker stores w for ttl: SET ... PX ttl XX, which replaces a live
// entry; only when there was none (the pool's first beat, or one after its
// entry ran out) an SADD to the index and a SET, in one pipeline. It
// implements broker.WorkerRegistry.
func (d *Driver) RegisterWorker(ctx context.Context, w *broker.WorkerInfo, ttl time.Duration) error {
	return d.Registry.RegisterWorker(ctx, w, ttl)
}

// UnregisterWorker removes the entry of pool id and its name. It implements
// broker.WorkerRegistry.
func (d *Driver) UnregisterWorker(ctx context.Context, id string) error {
	return d.Registry.UnregisterWorker(ctx, id)
}

// Workers returns the live entries, sorted by ID: SSCAN pages of the index,
// one MGET per page, and per page with names whose entry ran out one short
// script that removes them. An entry that does not decode is skipped. It
// implements broker.WorkerRegistry.
func (d *Driver) Workers(ctx context.Context) ([]*broker.WorkerInfo, error) {
	return d.Registry.Workers(ctx)
}

// PauseQueue sets queue's pause key (SET, no TTL: a pause lasts until
// ResumeQueue). It implements broker.Pauser.
func (d *Driver) PauseQueue(ctx context.Context, queue string) error {
	return d.Pauser.PauseQueue(ctx, queue)
}

// QueuePaused reports whether queue's pause key exists. It implements
// broker.Pauser.
func (d *Driver) QueuePaused(ctx context.Context, queue string) (bool, error) {
	return d.Pauser.QueuePaused(ctx, queue)
}

// ResumeQueue deletes queue's pause key. It implements broker.Pauser.
func (d *Driver) ResumeQueue(ctx context.Context, queue string) error {
	return d.Pauser.ResumeQueue(ctx, queue)
}

// SetLimit sets queue's fleet-wide concurrency limit for kind ("" for the
// whole queue) to n, or removes it when n is 0, and appends to the stream
// the waiting jobs it has room for: one script call per 1,000 jobs let in.
// It implements broker.Limiter.
func (d *Driver) SetLimit(ctx context.Context, queue, kind string, n int) error {
	if err := broker.ValidateLimit(queue, kind, n); err != nil {
		return err
	}
	k := d.keys(queue)
	return limits.Set(ctx, d.rdb, k.limits, limits.Target{Ready: k.stream, Mode: "stream", Group: d.cfg.Group, Wake: k.wake}, queue, kind, n)
}

// Limits reports queue's concurrency limits with their slots held and jobs
// waiting: one script call. It implements broker.Limiter.
func (d *Driver) Limits(ctx context.Context, queue string) ([]broker.Limit, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	return limits.Show(ctx, d.rdb, d.keys(queue).limits)
}

// RecordSample stores s as a sample of queue s.Queue's history, once per
// interval fleet-wide: one script call. It implements broker.Historian.
func (d *Driver) RecordSample(ctx context.Context, s broker.QueueSizes, every, keep time.Duration) (broker.Recorded, error) {
	return history.Record(ctx, d.rdb, d.keys(s.Queue).history, s, every, keep)
}

// History returns queue's samples taken at or after since, oldest first:
// one XREVRANGE. It implements broker.Historian.
func (d *Driver) History(ctx context.Context, queue string, since time.Time) ([]broker.Sample, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	return history.Read(ctx, d.rdb, d.keys(queue).history, since)
}
