package list

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Inspector on its keys: ready is the ready
// LIST, in flight the lease ZSET, delayed the timers (internal/timers),
// discarded the discard list (internal/discards). docs/inspector.md says
// what each call costs.
var _ broker.Inspector = (*Driver)(nil)

var (
	//go:embed lua/inspect_sizes.lua
	inspectSizesLua string
	//go:embed lua/inspect_page.lua
	inspectPageLua string
	//go:embed lua/inspect_find.lua
	inspectFindLua string
	//go:embed lua/inspect_purge.lua
	inspectPurgeLua string

	inspectSizesScript = script.New("list.inspect_sizes", timers.Lib+discards.Lib+inspect.Lib+inspectSizesLua)
	inspectPageScript  = script.New("list.inspect_page", inspectPageLua)
	inspectFindScript  = script.New("list.inspect_find", inspectFindLua)
	inspectPurgeScript = script.New("list.inspect_purge", inspectPurgeLua)
)

func (d *Driver) shared() inspect.Shared {
	return inspect.Shared{Client: d.client, Timers: d.Methods, Discards: d.Keeper}
}

// Queues returns the queues in the registry (<prefix>:queues), sorted: one
// SMEMBERS.
func (d *Driver) Queues(ctx context.Context) ([]string, error) {
	qs, err := registry.Queues(ctx, d.client, d.cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	return qs, nil
}

// QueueSizes returns the sizes and counters of each queue: one
// inspect_sizes.lua call per queue, all in one round trip.
func (d *Driver) QueueSizes(ctx context.Context, queues ...string) ([]broker.QueueSizes, error) {
	age := d.Keeper.Retention.AgeArg()
	out, err := inspect.Sizes(ctx, d.client, inspectSizesScript, d.Keeper.Retention, queues, func(q string) ([]string, []any) {
		k := d.keys(q)
		return []string{k.ready, k.lease, k.delayed, k.dead, k.dropped, k.expired, k.stats}, []any{age}
	})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	return out, nil
}

// ListJobs returns a page of queue's jobs in state: ready next-to-run
// first, in flight earliest lease deadline first, delayed earliest due
// first, discarded newest first.
func (d *Driver) ListJobs(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	const op = "list: list jobs"
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
	v, err := inspectPageScript.Run(ctx, d.client, []string{k.ready, k.lease}, stateArg(state), offset, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("%s of %q: %w", op, queue, err)
	}
	r, ok := v.([]any)
	if !ok || len(r)%2 != 1 {
		return nil, 0, fmt.Errorf("%s of %q: unexpected reply", op, queue)
	}
	total, _ := r[0].(int64)
	out := make([]*broker.JobInfo, 0, len(r)/2)
	for i := 1; i+1 < len(r); i += 2 {
		out = append(out, d.job(queue, state, r[i], r[i+1]))
	}
	return out, total, nil
}

// job decodes a stored message and its lease deadline (in flight) from a
// script reply.
func (d *Driver) job(queue string, state broker.JobState, v, score any) *broker.JobInfo {
	s, _ := v.(string)
	j := inspect.Decode(queue, state, []byte(s))
	if ms, _ := score.(int64); state == broker.JobInFlight && ms > 0 {
		j.LeaseDeadline = time.UnixMilli(ms)
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
// first, 1,000 records per call. Ready and in flight: a walk of the ready
// list or the lease ZSET, 1,000 messages per call, O(n) in all.
func (d *Driver) FindJob(ctx context.Context, queue string, state broker.JobState, id string) (*broker.JobInfo, error) {
	const op = "list: find job"
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
		off := 0
		if cursor != "" {
			off, _ = strconv.Atoi(cursor)
		}
		v, err := inspectFindScript.Run(ctx, d.client, []string{k.ready, k.lease}, stateArg(state), id, off, inspect.Step)
		if err != nil {
			return nil, "", err
		}
		r, ok := v.([]any)
		if !ok || len(r) != 3 {
			return nil, "", fmt.Errorf("unexpected reply %v", v)
		}
		if s, _ := r[0].(string); s != "" {
			return d.job(queue, state, s, r[1]), "", nil
		}
		next, _ := r[2].(int64)
		if next < 0 {
			return nil, "", nil
		}
		return nil, strconv.FormatInt(next, 10), nil
	})
	return j, wrap(op, err)
}

// PurgeReady deletes up to max ready jobs of queue (0: all it held when the
// call began), next-to-run first, 1,000 per script call.
func (d *Driver) PurgeReady(ctx context.Context, queue string, max int) (int, error) {
	const op = "list: purge ready"
	if err := inspect.CheckQueue(op, queue); err != nil {
		return 0, err
	}
	if err := inspect.CheckMax(op, max); err != nil {
		return 0, err
	}
	k := d.keys(queue)
	n, err := inspect.Purge(ctx, max, func(ctx context.Context, n int) (int64, int64, error) {
		v, err := inspectPurgeScript.Run(ctx, d.client, []string{k.ready}, n)
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
	const op = "list: purge delayed"
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
