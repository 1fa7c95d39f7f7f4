package conveyor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// ErrJobNotFound is returned by Inspector.Job when no job of the queue has
// the ID in the states searched.
var ErrJobNotFound = errors.New("conveyor: job not found")

// JobState is where a job of a queue is: JobReady, JobInFlight,
// JobDelayed, JobDiscarded or JobFinished (broker.JobState).
type JobState = broker.JobState

// The states of a job.
const (
	JobReady     = broker.JobReady
	JobInFlight  = broker.JobInFlight
	JobDelayed   = broker.JobDelayed
	JobDiscarded = broker.JobDiscarded
	// JobFinished: a record of a finished job, kept where it was asked for
	// (EnqueueOptions.Record, worker.Config.Records); JobInfo.Record holds
	// it.
	JobFinished = broker.JobFinished
)

// JobRecord is what became of a finished job (broker.JobRecord).
type JobRecord = broker.JobRecord

// RecordStats are the figures of a queue's records of finished jobs
// (broker.RecordStats).
type RecordStats = broker.RecordStats

// JobInfo is one job as the Inspector found it (broker.JobInfo).
type JobInfo = broker.JobInfo

// QueueSizes are the figures of one queue, read together: its jobs per
// state, its throughput counters and its discard queue's figures
// (broker.QueueSizes).
type QueueSizes = broker.QueueSizes

// DiscardFilter selects the discard records Redrive acts on: its zero
// value selects every record, each field set narrows the selection
// (broker.DiscardFilter).
type DiscardFilter = broker.DiscardFilter

// InspectorConfig configures an Inspector. The zero value is valid.
type InspectorConfig struct {
	// DefaultLimit is the page size of Jobs when ListOptions.Limit is 0,
	// at most broker.MaxInspectPage (1,000). Defaults to 100.
	DefaultLimit int
}

// ListOptions choose a page of Inspector.Jobs. A nil *ListOptions means the
// first page of the default size.
type ListOptions struct {
	// Offset is the position of the page's first job in the state's order.
	// Defaults to 0.
	Offset int
	// Limit caps the jobs of the page, 1 to broker.MaxInspectPage (1,000).
	// Defaults to InspectorConfig.DefaultLimit.
	Limit int
}

// JobPage is one page of a queue's jobs in one state.
type JobPage struct {
	// Jobs are the page's jobs, in the state's order (see JobState).
	Jobs []*JobInfo
	// Total is how many jobs the state held when the page was read.
	Total int64
	// Offset and Limit are those the page was read with.
	Offset, Limit int
}

// Next returns the offset of the page after p; ok is false when p reached
// the end of the state.
func (p *JobPage) Next() (offset int, ok bool) {
	next := p.Offset + len(p.Jobs)
	return next, len(p.Jobs) > 0 && int64(next) < p.Total
}

// Inspector reads and repairs the queues of a durable driver (list,
// stream): the queues and their sizes, the jobs of each state page by page,
// a job by ID, re-drive of discarded jobs, cancel of timers, purge. The CLI
// (docs/cli.md) is a thin layer over it. It is safe for concurrent use.
//
// Every per-queue read goes straight to the queue's keys: no KEYS, no SCAN.
// docs/inspector.md says what each call costs.
type Inspector struct {
	d     broker.Driver
	x     broker.Inspector
	limit int
}

// NewInspector returns an inspector of d's queues. A driver that stores no
// queues (pubsub) has nothing to inspect: NewInspector fails with an error
// wrapping ErrUnsupported.
func NewInspector(d broker.Driver, cfg *InspectorConfig) (*Inspector, error) {
	if d == nil {
		return nil, errors.New("conveyor: NewInspector: nil driver")
	}
	x, ok := d.(broker.Inspector)
	if !ok {
		return nil, fmt.Errorf("conveyor: NewInspector: driver %T keeps no queues to inspect: %w", d, broker.ErrUnsupported)
	}
	var c InspectorConfig
	if cfg != nil {
		c = *cfg
	}
	switch {
	case c.DefaultLimit == 0:
		c.DefaultLimit = 100
	case c.DefaultLimit < 0 || c.DefaultLimit > broker.MaxInspectPage:
		return nil, fmt.Errorf("conveyor: NewInspector: DefaultLimit %d: want 1 to %d", c.DefaultLimit, broker.MaxInspectPage)
	}
	return &Inspector{d: d, x: x, limit: c.DefaultLimit}, nil
}

// checkQueue validates a queue name for op.
func checkQueue(op, queue string) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return fmt.Errorf("conveyor: inspector: %s: %w", op, err)
	}
	return nil
}

// checkState validates a job state for op.
func checkState(op string, s JobState) error {
	if !s.Valid() {
		return fmt.Errorf("conveyor: inspector: %s: %v is not a job state: want ready, in_flight, delayed, discarded or finished", op, s)
	}
	return nil
}

// Queues returns the names of the queues known under the driver's prefix,
// sorted: every queue a process enqueued to or consumed since this
// version. One round trip per 1,000 queues.
func (i *Inspector) Queues(ctx context.Context) ([]string, error) {
	qs, err := i.x.Queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: queues: %w", err)
	}
	return qs, nil
}

// Queue returns the figures of queue: its jobs per state, its processed and
// failed counters and its discard queue's figures, read atomically in one
// round trip. A queue never used has all zeros.
func (i *Inspector) Queue(ctx context.Context, queue string) (*QueueSizes, error) {
	if err := checkQueue("queue", queue); err != nil {
		return nil, err
	}
	s, err := i.x.QueueSizes(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: queue %q: %w", queue, err)
	}
	if len(s) != 1 {
		return nil, fmt.Errorf("conveyor: inspector: queue %q: driver returned %d sizes", queue, len(s))
	}
	return &s[0], nil
}

// AllQueues returns the figures of every known queue, sorted by name: the
// registry's read (one round trip per 1,000 queues), then one pipeline of
// one script call per queue.
func (i *Inspector) AllQueues(ctx context.Context) ([]*QueueSizes, error) {
	qs, err := i.Queues(ctx)
	if err != nil || len(qs) == 0 {
		return nil, err
	}
	s, err := i.x.QueueSizes(ctx, qs...)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: queue sizes: %w", err)
	}
	out := make([]*QueueSizes, len(s))
	for k := range s {
		out[k] = &s[k]
	}
	return out, nil
}

// Jobs returns a page of queue's jobs in state. The order is the state's
// own: ready jobs next-to-run first, in-flight jobs earliest lease deadline
// first (list driver) or oldest entry first (stream driver), delayed jobs
// earliest due first, discarded jobs newest first.
func (i *Inspector) Jobs(ctx context.Context, queue string, state JobState, opts *ListOptions) (*JobPage, error) {
	if err := checkQueue("jobs", queue); err != nil {
		return nil, err
	}
	if err := checkState("jobs", state); err != nil {
		return nil, err
	}
	var o ListOptions
	if opts != nil {
		o = *opts
	}
	if o.Limit == 0 {
		o.Limit = i.limit
	}
	if o.Offset < 0 {
		return nil, fmt.Errorf("conveyor: inspector: jobs: offset %d is negative", o.Offset)
	}
	if o.Limit < 1 || o.Limit > broker.MaxInspectPage {
		return nil, fmt.Errorf("conveyor: inspector: jobs: limit %d: want 1 to %d", o.Limit, broker.MaxInspectPage)
	}
	js, total, err := i.x.ListJobs(ctx, queue, state, o.Offset, o.Limit)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: %v jobs of %q: %w", state, queue, err)
	}
	return &JobPage{Jobs: js, Total: total, Offset: o.Offset, Limit: o.Limit}, nil
}

// searchOrder is Job's default: every state where a job is now, cheapest
// first (delayed is O(1); in flight holds as many jobs as run at once;
// discarded at most the discard cap; ready the whole backlog), then its
// record (O(1)): a job waiting or running again under a reused ID, or
// re-driven, is found as it is now, not as it ended before.
var searchOrder = [...]JobState{JobDelayed, JobInFlight, JobDiscarded, JobReady, JobFinished}

// Job returns the job id of queue, searching states in the order given,
// by default every state where a job is now, cheapest first: delayed, in
// flight, discarded, ready; then finished (a record, where one was kept).
// To look up a finished job without walking the ready backlog, ask for
// JobFinished alone. It fails with ErrJobNotFound when no state holds the job. A job
// that moves between states while the search runs may be missed; an ID in
// two states (a discard record of an earlier run and a new job with the
// same business key) is found in the first searched.
func (i *Inspector) Job(ctx context.Context, queue, id string, states ...JobState) (*JobInfo, error) {
	if err := checkQueue("job", queue); err != nil {
		return nil, err
	}
	if len(states) == 0 {
		states = searchOrder[:]
	}
	for _, s := range states {
		if err := checkState("job", s); err != nil {
			return nil, err
		}
	}
	records := i.d.Capabilities().Records
	for _, s := range states {
		if s == JobFinished && !records {
			continue // the driver keeps none
		}
		j, err := i.x.FindJob(ctx, queue, s, id)
		if err != nil {
			return nil, fmt.Errorf("conveyor: inspector: job %q of %q: %w", id, queue, err)
		}
		if j != nil {
			return j, nil
		}
	}
	return nil, fmt.Errorf("conveyor: inspector: job %q of %q: %w", id, queue, ErrJobNotFound)
}

// Redrive moves the discarded jobs of queue that f selects (its zero value:
// all), oldest first, up to max of them (0: all), back to the queue to run
// again at once with their attempts reset, and reports how many it moved
// (broker.Discards.Redrive).
func (i *Inspector) Redrive(ctx context.Context, queue string, f DiscardFilter, max int) (int, error) {
	if err := checkQueue("redrive", queue); err != nil {
		return 0, err
	}
	if max < 0 {
		return 0, fmt.Errorf("conveyor: inspector: redrive: max %d is negative", max)
	}
	x, err := i.discards("redrive")
	if err != nil {
		return 0, err
	}
	n, err := x.Redrive(ctx, queue, f, max)
	if err != nil {
		return n, fmt.Errorf("conveyor: inspector: redrive %q: %w", queue, err)
	}
	return n, nil
}

// Cancel removes the pending timer id of queue (a delayed job, or a retry
// waiting under its job's ID) and reports whether it was still pending; of
// a cancel and the timer's promotion exactly one wins.
func (i *Inspector) Cancel(ctx context.Context, queue, id string) (bool, error) {
	t, err := i.timers("cancel", queue)
	if err != nil {
		return false, err
	}
	pending, err := t.Cancel(ctx, queue, id)
	if err != nil {
		return false, fmt.Errorf("conveyor: inspector: cancel %q of %q: %w", id, queue, err)
	}
	return pending, nil
}

// Reschedule moves the pending timer id of queue to at and reports whether
// it was still pending, as Client.Reschedule does: of a reschedule and the
// timer's promotion exactly one wins.
func (i *Inspector) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	t, err := i.timers("reschedule", queue)
	if err != nil {
		return false, err
	}
	pending, err := t.Reschedule(ctx, queue, id, at)
	if err != nil {
		return false, fmt.Errorf("conveyor: inspector: reschedule %q of %q: %w", id, queue, err)
	}
	return pending, nil
}

// timers returns the driver's timers for op on queue.
func (i *Inspector) timers(op, queue string) (broker.Timers, error) {
	if err := checkQueue(op, queue); err != nil {
		return nil, err
	}
	t, ok := i.d.(broker.Timers)
	if !ok || !i.d.Capabilities().Delay {
		return nil, fmt.Errorf("conveyor: inspector: %s: driver %T has no timers: %w", op, i.d, broker.ErrUnsupported)
	}
	return t, nil
}

// CancelJob cancels the job id of queue wherever it is and reports the
// state it was in (0: nothing held it), as Client.CancelJob does.
func (i *Inspector) CancelJob(ctx context.Context, queue, id string) (JobState, error) {
	if err := checkQueue("cancel job", queue); err != nil {
		return 0, err
	}
	return cancelJob(ctx, i.d, queue, id)
}

// Purge deletes up to max jobs of queue in state (0: all the state held when
// the call began) and reports how many it deleted: ready jobs next-to-run
// first, delayed jobs earliest due first, discarded jobs oldest first.
// In-flight jobs cannot be purged: they are leased to workers, whose
// settles are fenced; wait for them to settle, or for their leases to run
// out and purge them from ready.
func (i *Inspector) Purge(ctx context.Context, queue string, state JobState, max int) (int, error) {
	if err := checkQueue("purge", queue); err != nil {
		return 0, err
	}
	if err := checkState("purge", state); err != nil {
		return 0, err
	}
	if max < 0 {
		return 0, fmt.Errorf("conveyor: inspector: purge: max %d is negative", max)
	}
	var (
		n   int
		err error
	)
	switch state {
	case JobReady:
		n, err = i.x.PurgeReady(ctx, queue, max)
	case JobDelayed:
		n, err = i.x.PurgeDelayed(ctx, queue, max)
	case JobDiscarded:
		var x broker.Discards
		if x, err = i.discards("purge"); err != nil {
			return 0, err
		}
		n, err = x.PurgeDiscarded(ctx, queue, broker.DiscardFilter{}, max)
	case JobInFlight:
		return 0, errors.New("conveyor: inspector: purge: in-flight jobs cannot be purged: they are leased to workers; " +
			"wait for them to settle, or for their leases to run out and purge them as ready jobs")
	case JobFinished:
		return 0, errors.New("conveyor: inspector: purge: records of finished jobs are not purged: their retention drops them")
	}
	if err != nil {
		return n, fmt.Errorf("conveyor: inspector: purge %v jobs of %q: %w", state, queue, err)
	}
	return n, nil
}

// RecordStats returns the figures of queue's records of finished jobs:
// how many it holds and how many retention dropped.
func (i *Inspector) RecordStats(ctx context.Context, queue string) (RecordStats, error) {
	if err := checkQueue("record stats", queue); err != nil {
		return RecordStats{}, err
	}
	x, ok := i.d.(broker.Records)
	if !ok || !i.d.Capabilities().Records {
		return RecordStats{}, fmt.Errorf("conveyor: inspector: record stats: driver %T keeps no records: %w", i.d, broker.ErrUnsupported)
	}
	st, err := x.RecordStats(ctx, queue)
	if err != nil {
		return st, fmt.Errorf("conveyor: inspector: record stats of %q: %w", queue, err)
	}
	return st, nil
}

func (i *Inspector) discards(op string) (broker.Discards, error) {
	x, ok := i.d.(broker.Discards)
	if !ok || !i.d.Capabilities().Discard {
		return nil, fmt.Errorf("conveyor: inspector: %s: driver %T has no discard queue: %w", op, i.d, broker.ErrUnsupported)
	}
	return x, nil
}

// WorkerInfo is one worker pool as it registered itself (broker.WorkerInfo):
// host, process, queues, concurrency and the jobs its handlers run.
type WorkerInfo = broker.WorkerInfo

// RunningJob is one job a registered pool runs (broker.RunningJob).
type RunningJob = broker.RunningJob

// Workers lists the live worker pools of the fleet, sorted by ID: every
// pool on the driver's prefix registers itself and renews its entry every
// worker.Config.RegistryInterval (15s by default); a pool that stops
// removes its entry, and that of a process that died goes within three
// intervals. It reads the registry in pages of 500 (SSCAN, MGET), so its
// cost grows with the fleet, not with the jobs.
func (i *Inspector) Workers(ctx context.Context) ([]*WorkerInfo, error) {
	r, ok := i.d.(broker.WorkerRegistry)
	if !ok {
		return nil, fmt.Errorf("conveyor: inspector: workers: driver %T keeps no worker registry: %w", i.d, broker.ErrUnsupported)
	}
	ws, err := r.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: workers: %w", err)
	}
	return ws, nil
}

// Pause pauses queue across the fleet: from at most broker.PauseLag after
// it returns no pool fetches from it, and a pool hands back the jobs it
// fetched ahead instead of starting them (within about twice that); running
// jobs finish. The queue still takes enqueues and its timers are still
// promoted. The pause is a key in Redis ({queue}:paused): it lasts, across
// restarts of every process, until Resume.
func (i *Inspector) Pause(ctx context.Context, queue string) error {
	p, err := i.pauser("pause", queue)
	if err != nil {
		return err
	}
	if err := p.PauseQueue(ctx, queue); err != nil {
		return fmt.Errorf("conveyor: inspector: %w", err)
	}
	return nil
}

// Resume lets the pools fetch from queue again, within broker.PauseLag.
// Resuming a queue that is not paused does nothing.
func (i *Inspector) Resume(ctx context.Context, queue string) error {
	p, err := i.pauser("resume", queue)
	if err != nil {
		return err
	}
	if err := p.ResumeQueue(ctx, queue); err != nil {
		return fmt.Errorf("conveyor: inspector: %w", err)
	}
	return nil
}

// Paused reports whether queue is paused.
func (i *Inspector) Paused(ctx context.Context, queue string) (bool, error) {
	p, err := i.pauser("paused", queue)
	if err != nil {
		return false, err
	}
	paused, err := p.QueuePaused(ctx, queue)
	if err != nil {
		return false, fmt.Errorf("conveyor: inspector: %w", err)
	}
	return paused, nil
}

// pauser returns the driver's broker.Pauser for op on queue.
func (i *Inspector) pauser(op, queue string) (broker.Pauser, error) {
	if err := checkQueue(op, queue); err != nil {
		return nil, err
	}
	p, ok := i.d.(broker.Pauser)
	if !ok || !i.d.Capabilities().Pause {
		return nil, fmt.Errorf("conveyor: inspector: %s: driver %T cannot pause queues: %w", op, i.d, broker.ErrUnsupported)
	}
	return p, nil
}
