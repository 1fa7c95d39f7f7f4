package stream

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Inspector on its keys: ready are the
// stream's entries after the group's last-delivered-id, in flight those in
// the group's pending list, delayed the timers (internal/timers),
// discarded the discard list (internal/discards). lua/inspect_lib.lua says
// why the stream holds nothing else. docs/inspector.md says what each call
// costs.
var _ broker.Inspector = (*Driver)(nil)

var (
	//go:embed lua/inspect_lib.lua
	inspectLib string
	//go:embed lua/inspect_sizes.lua
	inspectSizesSrc string
	//go:embed lua/inspect_page.lua
	inspectPageSrc string
	//go:embed lua/inspect_find.lua
	inspectFindSrc string
	//go:embed lua/inspect_purge.lua
	inspectPurgeSrc string

	inspectSizesScript = script.New("stream/inspect_sizes", timers.Lib+discards.Lib+inspect.Lib+inspectLib+inspectSizesSrc)
	inspectPageScript  = script.New("stream/inspect_page", timers.Lib+inspectLib+inspectPageSrc)
	inspectFindScript  = script.New("stream/inspect_find", timers.Lib+inspectLib+inspectFindSrc)
	inspectPurgeScript = script.New("stream/inspect_purge", inspectLib+inspectPurgeSrc)
)

func (d *Driver) shared() inspect.Shared {
	return inspect.Shared{Client: d.rdb, Timers: d.Methods, Discards: d.Keeper}
}

// Queues returns the queues in the registry (<prefix>:queues), sorted: one
// SMEMBERS.
func (d *Driver) Queues(ctx context.Context) ([]string, error) {
	qs, err := registry.Queues(ctx, d.rdb, d.cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	return qs, nil
}

// QueueSizes returns the sizes and counters of each queue: one
// inspect_sizes.lua call per queue, all in one round trip.
func (d *Driver) QueueSizes(ctx context.Context, queues ...string) ([]broker.QueueSizes, error) {
	age := d.Keeper.Retention.AgeArg()
	out, err := inspect.Sizes(ctx, d.rdb, inspectSizesScript, d.Keeper.Retention, queues, func(q string) ([]string, []any) {
		k := d.keys(q)
		return []string{k.stream, k.delayed, k.dead, k.deadDropped, k.deadExpired, k.stats}, []any{d.cfg.Group, age}
	})
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	return out, nil
}

// ListJobs returns a page of queue's jobs in state: ready and in flight
// oldest entry first (ready: the order they are fetched in), delayed
// earliest due first, discarded newest first. Ready and in-flight pages
// cost O(offset + limit): a stream has no index by position.
func (d *Driver) ListJobs(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	const op = "stream: list jobs"
	if err := inspect.CheckQueue(op, queue); err != nil {
		return nil, 0, err
	}
	if err := inspect.CheckState(op, state); err != nil {
		return nil, 0, err
	}
	if err := inspect.CheckPage(op, offset, limit); err != nil {
		return nil, 0, err
	}
	switch state {
	case broker.JobDelayed:
		return d.shared().ListDelayed(ctx, queue, offset, limit)
	case broker.JobDiscarded:
		return d.shared().ListDiscarded(ctx, queue, offset, limit)
	}
	k := d.keys(queue)
	cursor, skip := "", int64(offset)
	for range inspect.MaxSteps {
		v, err := inspectPageScript.Run(ctx, d.rdb, []string{k.stream}, d.cfg.Group, stateArg(state), cursor, skip, limit)
		if err != nil {
			return nil, 0, fmt.Errorf("%s of %q: %w", op, queue, err)
		}
		r, ok := v.([]any)
		if !ok || len(r) < 4 || (len(r)-4)%5 != 0 {
			return nil, 0, fmt.Errorf("%s of %q: unexpected reply", op, queue)
		}
		total, _ := r[0].(int64)
		now, _ := r[1].(int64)
		cursor, _ = r[2].(string)
		skip, _ = r[3].(int64)
		if skip > 0 {
			continue
		}
		out := make([]*broker.JobInfo, 0, (len(r)-4)/5)
		for i := 4; i+4 < len(r); i += 5 {
			out = append(out, d.job(queue, state, now, r[i+1:i+5]))
		}
		return out, total, nil
	}
	return nil, 0, fmt.Errorf("%s of %q: stopped after %d steps", op, queue, inspect.MaxSteps)
}

// job decodes an entry from a script reply: consumer, idle time, delivery
// count, stored message. now is the server's time (unix ms).
func (d *Driver) job(queue string, state broker.JobState, now int64, f []any) *broker.JobInfo {
	consumer, _ := f[0].(string)
	idle, _ := f[1].(int64)
	count, _ := f[2].(int64)
	body, _ := f[3].(string)
	j := inspect.Decode(queue, state, []byte(body))
	if state == broker.JobInFlight {
		j.Consumer = consumer
		if idle >= 0 {
			j.LeasedAt = time.UnixMilli(now - idle)
		}
		// As a fetch counts them: a delivery count above 1 means earlier
		// leases of this entry expired.
		if count > 1 && j.Raw == nil {
			j.Recoveries += int(count - 1)
		}
	}
	return j
}

func stateArg(s broker.JobState) string {
	if s == broker.JobInFlight {
		return "in_flight"
	}
	return "ready"
}

// FindJob returns the job id of queue if it is in state, nil if not.
// Delayed: O(1) (the timers HASH). Discarded: the discard list, newest
// first, 1,000 records per call. Ready and in flight: a walk of the
// state's part of the stream, 1,000 entries per call, O(n) in all.
func (d *Driver) FindJob(ctx context.Context, queue string, state broker.JobState, id string) (*broker.JobInfo, error) {
	const op = "stream: find job"
	if err := inspect.CheckQueue(op, queue); err != nil {
		return nil, err
	}
	if err := inspect.CheckState(op, state); err != nil {
		return nil, err
	}
	if err := inspect.CheckID(op, id); err != nil {
		return nil, err
	}
	k := d.keys(queue)
	switch state {
	case broker.JobDelayed:
		j, err := d.shared().FindDelayed(ctx, k.timers, id)
		return j, wrap(op, err)
	case broker.JobDiscarded:
		return d.shared().FindDiscarded(ctx, queue, id)
	}
	j, err := inspect.Find(ctx, func(ctx context.Context, cursor string) (*broker.JobInfo, string, error) {
		v, err := inspectFindScript.Run(ctx, d.rdb, []string{k.stream}, d.cfg.Group, stateArg(state), id, cursor, inspect.Step)
		if err != nil {
			return nil, "", err
		}
		r, ok := v.([]any)
		if !ok || len(r) < 3 {
			return nil, "", fmt.Errorf("unexpected reply %v", v)
		}
		now, _ := r[1].(int64)
		if found, _ := r[0].(int64); found == 1 {
			if len(r) != 7 {
				return nil, "", fmt.Errorf("unexpected reply %v", v)
			}
			return d.job(queue, state, now, r[3:7]), "", nil
		}
		next, _ := r[2].(string)
		return nil, next, nil
	})
	return j, wrap(op, err)
}

// PurgeReady deletes up to max ready entries of queue (0: all it held when
// the call began), next-to-run first, 1,000 per script call.
func (d *Driver) PurgeReady(ctx context.Context, queue string, max int) (int, error) {
	const op = "stream: purge ready"
	if err := inspect.CheckQueue(op, queue); err != nil {
		return 0, err
	}
	if err := inspect.CheckMax(op, max); err != nil {
		return 0, err
	}
	k := d.keys(queue)
	n, err := inspect.Purge(ctx, max, func(ctx context.Context, n int) (int64, int64, error) {
		v, err := inspectPurgeScript.Run(ctx, d.rdb, []string{k.stream}, d.cfg.Group, n)
		if err != nil {
			return 0, 0, err
		}
		r, ok := v.([]any)
		if !ok || len(r) != 2 {
			return 0, 0, fmt.Errorf("unexpected reply %v", v)
		}
		deleted, _ := r[0].(int64)
		held, _ := r[1].(int64)
		return deleted, held, nil
	})
	return n, wrap(op, err)
}

// PurgeDelayed deletes up to max pending timers of queue (0: all it held
// when the call began), earliest due first, 1,000 per script call.
func (d *Driver) PurgeDelayed(ctx context.Context, queue string, max int) (int, error) {
	const op = "stream: purge delayed"
	if err := inspect.CheckQueue(op, queue); err != nil {
		return 0, err
	}
	if err := inspect.CheckMax(op, max); err != nil {
		return 0, err
	}
	n, err := d.shared().PurgeDelayed(ctx, d.keys(queue).timers, max)
	return n, wrap(op, err)
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}
