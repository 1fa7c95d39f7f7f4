package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/records"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Inspector is broker.Inspector on a durable driver's keys. It does what
// the drivers do alike: it checks every call's arguments, reads the
// registry, and serves the delayed state (internal/timers) and the
// discarded state (internal/discards). The ready and in-flight structures
// are the driver's own; it reaches them through SizesCall, Page, FindStep
// and PurgeStep, each called with arguments already checked.
type Inspector struct {
	// Name starts every error ("list", "stream").
	Name string
	// Client is the driver's Redis client.
	Client redis.UniversalClient
	// Prefix is the driver's key prefix, under which the registry is.
	Prefix string
	// Timers are the driver's timers: the delayed state.
	Timers *timers.Methods
	// Discards is the driver's discard queue: the discarded state.
	Discards *discards.Keeper
	// Records are the driver's records of finished jobs: the finished
	// state.
	Records *records.Records

	// SizesScript is the driver's sizes script: its reply is {ready, in
	// flight} then queue_tail's figures (Lib).
	SizesScript *script.Script
	// SizesCall returns SizesScript's KEYS and ARGV for queue; maxAge is the
	// discard retention's age limit as ARGV for queue_tail (ms; <= 0: none).
	SizesCall func(queue string, maxAge int64) (keys []string, args []any)
	// Page returns up to limit of queue's ready or in-flight jobs from
	// offset on, in the state's order, and how many the state holds.
	Page func(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error)
	// FindStep looks for id in the next stretch (at most Step entries) of
	// queue's ready or in-flight structure, from cursor ("": its start), and
	// returns the job or the cursor to go on from ("": the structure ends).
	FindStep func(ctx context.Context, queue string, state broker.JobState, id, cursor string) (*broker.JobInfo, string, error)
	// PurgeStep deletes up to n (at most Step) of queue's ready jobs, next
	// to run first, and reports how many it deleted and how many were
	// ready before.
	PurgeStep func(ctx context.Context, queue string, n int) (deleted, held int64, err error)
}

var _ broker.Inspector = (*Inspector)(nil)

// Queues returns the queues in the registry (<prefix>:queues), sorted: one
// SSCAN per 1,000 queues.
func (x *Inspector) Queues(ctx context.Context) ([]string, error) {
	qs, err := registry.Queues(ctx, x.Client, x.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", x.Name, err)
	}
	return qs, nil
}

// QueueSizes returns the sizes and counters of each queue: one SizesScript
// call per queue, all in one round trip.
func (x *Inspector) QueueSizes(ctx context.Context, queues ...string) ([]broker.QueueSizes, error) {
	r := x.Discards.Retention
	age := r.AgeArg()
	out, err := sizes(ctx, x.Client, x.SizesScript, r, queues, func(q string) ([]string, []any) { return x.SizesCall(q, age) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", x.Name, err)
	}
	return out, nil
}

// ListJobs returns a page of queue's jobs in state: delayed earliest due
// first (the timers ZSET), discarded newest first (the discard list),
// finished the latest to expire first (internal/records), ready and in
// flight as Page returns them.
func (x *Inspector) ListJobs(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	op := x.Name + ": list jobs"
	if err := checkQueue(op, queue); err != nil {
		return nil, 0, err
	}
	if err := checkState(op, state); err != nil {
		return nil, 0, err
	}
	if err := checkPage(op, offset, limit); err != nil {
		return nil, 0, err
	}
	switch state {
	case broker.JobDelayed:
		return x.listDelayed(ctx, queue, offset, limit)
	case broker.JobDiscarded:
		return x.listDiscarded(ctx, queue, offset, limit)
	case broker.JobFinished:
		return records.ListJobs(ctx, x.Records, queue, offset, limit)
	}
	out, total, err := x.Page(ctx, queue, state, offset, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("%s of %q: %w", op, queue, err)
	}
	return out, total, nil
}

// FindJob returns the job id of queue if it is in state, nil if not.
// Delayed: O(1) (the timers HASH). Discarded: the discard list, newest
// first, 1,000 records per call. Finished: O(1) (the records HASH). Ready
// and in flight: a walk with
// FindStep, Step entries per call.
func (x *Inspector) FindJob(ctx context.Context, queue string, state broker.JobState, id string) (*broker.JobInfo, error) {
	op := x.Name + ": find job"
	if err := checkQueue(op, queue); err != nil {
		return nil, err
	}
	if err := checkState(op, state); err != nil {
		return nil, err
	}
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	switch state {
	case broker.JobDelayed:
		j, err := x.findDelayed(ctx, x.timerKeys(queue), id)
		return j, wrap(op, err)
	case broker.JobDiscarded:
		return x.findDiscarded(ctx, queue, id)
	case broker.JobFinished:
		r, err := x.Records.GetRecord(ctx, queue, id)
		if r == nil || err != nil {
			return nil, err
		}
		return records.Info(queue, r), nil
	}
	j, err := walk(ctx, func(ctx context.Context, cursor string) (*broker.JobInfo, string, error) {
		return x.FindStep(ctx, queue, state, id, cursor)
	})
	return j, wrap(op, err)
}

// PurgeReady deletes up to max ready jobs of queue (0: all it held when the
// call began), next-to-run first, Step per PurgeStep call.
func (x *Inspector) PurgeReady(ctx context.Context, queue string, max int) (int, error) {
	op := x.Name + ": purge ready"
	if err := checkPurge(op, queue, max); err != nil {
		return 0, err
	}
	n, err := purge(ctx, max, func(ctx context.Context, n int) (int64, int64, error) {
		return x.PurgeStep(ctx, queue, n)
	})
	return n, wrap(op, err)
}

// PurgeDelayed deletes up to max pending timers of queue (0: all it held
// when the call began), earliest due first, Step per script call
// (internal/timers' purge.lua).
func (x *Inspector) PurgeDelayed(ctx context.Context, queue string, max int) (int, error) {
	op := x.Name + ": purge delayed"
	if err := checkPurge(op, queue, max); err != nil {
		return 0, err
	}
	k, to := x.Timers.Keys(queue)
	n, err := purge(ctx, max, func(ctx context.Context, n int) (int64, int64, error) {
		return timers.PurgeStep(ctx, x.Client, k, to, n)
	})
	return n, wrap(op, err)
}

// PurgeReply decodes a purge step script's reply {deleted, held before}.
func PurgeReply(v any) (deleted, held int64, err error) {
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return 0, 0, fmt.Errorf("unexpected reply %v", v)
	}
	deleted, _ = r[0].(int64)
	held, _ = r[1].(int64)
	return deleted, held, nil
}

func (x *Inspector) timerKeys(queue string) timers.Keys {
	k, _ := x.Timers.Keys(queue)
	return k
}

// listDelayed returns a page of queue's pending timers, earliest due first.
func (x *Inspector) listDelayed(ctx context.Context, queue string, offset, limit int) ([]*broker.JobInfo, int64, error) {
	ms, total, err := x.Timers.PendingTimers(ctx, queue, offset, limit)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*broker.JobInfo, len(ms))
	for i, m := range ms {
		out[i] = fromTimer(m)
	}
	return out, total, nil
}

// listDiscarded returns a page of queue's discard records, newest first.
func (x *Inspector) listDiscarded(ctx context.Context, queue string, offset, limit int) ([]*broker.JobInfo, int64, error) {
	recs, total, err := x.Discards.ListDiscarded(ctx, queue, offset, limit)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*broker.JobInfo, len(recs))
	for i, r := range recs {
		out[i] = fromDiscarded(r)
	}
	return out, total, nil
}

// findDelayed looks the timer id of queue up: one round trip, O(1) (its
// due time and its body read in one pipeline). A retry whose ID a caller's
// timer held waits under "<id>#r<n>" (docs/delay.md); it is not found by
// id.
func (x *Inspector) findDelayed(ctx context.Context, k timers.Keys, id string) (*broker.JobInfo, error) {
	p := x.Client.Pipeline()
	score := p.ZScore(ctx, k.Delayed, id)
	body := p.HGet(ctx, k.Timers, id)
	_, err := p.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("find delayed %q in %q: %w", id, k.Queue, err)
	}
	if score.Err() != nil || body.Err() != nil {
		return nil, nil // promoted or cancelled between the two reads, or never there
	}
	j := Decode(k.Queue, broker.JobDelayed, []byte(body.Val()))
	j.RunAt = time.UnixMilli(int64(score.Val()))
	return j, nil
}

// findDiscarded returns the newest discard record of id in queue.
func (x *Inspector) findDiscarded(ctx context.Context, queue, id string) (*broker.JobInfo, error) {
	r, err := x.Discards.GetDiscarded(ctx, queue, id)
	if err != nil || r == nil {
		return nil, err
	}
	return fromDiscarded(r), nil
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}
