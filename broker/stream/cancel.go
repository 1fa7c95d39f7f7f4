package stream

import (
	"context"
	_ "embed"
	"fmt"
	"slices"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/cancels"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/limits"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Canceler with internal/cancels: a delayed
// job's timer is cancelled through internal/timers, a ready entry is
// deleted (a job waiting in its group's line, internal/groups, or in a
// concurrency limit's line, internal/limits, is removed from the line),
// and an in-flight delivery is marked by its entry ID in the queue's marks
// ZSET {q}:canceled (lua/cancel.lua). Extend reports a marked delivery
// (lua/extend.lua); a takeover of its expired lease deletes its entry
// instead of delivering it (lua/fetch.lua).
var _ broker.Canceler = (*Driver)(nil)

var (
	//go:embed lua/cancel.lua
	cancelSrc    string
	cancelScript = script.New("stream/cancel", cancelSrc, timers.Lib+cancels.Lib+groups.Lib+limits.Lib+lib+inspectLib)
)

// cancelStretch is how many entries one cancel.lua call looks at.
const cancelStretch = 500

// CancelJob cancels the job id of queue and reports the state it was in (0:
// none held it). A delayed job's timer is removed; a ready entry is
// deleted, and a job waiting in its group's line or in a concurrency
// limit's line removed from it (all reported as ready); an in-flight
// delivery is marked, its ID published on the queue's cancel channel, and
// its holder ends it, or, when its holder died, the takeover of its lease
// deletes it (see broker.Canceler). Finding a
// ready or in-flight job walks the state's part of the stream, oldest
// entry first, 500 entries per script call: O(entries ahead of it). It
// implements broker.Canceler.
func (d *Driver) CancelJob(ctx context.Context, queue, id string) (broker.JobState, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("stream: cancel job: %w", err)
	}
	st, err := cancels.Cancel(ctx, d.Methods, d.cancelStep, queue, id)
	if err != nil {
		return 0, fmt.Errorf("stream: cancel job %q of %q: %w", id, queue, err)
	}
	return st, nil
}

// cancelStep is one cancel.lua call (a cancels.Step); its cursor is the
// last entry ID it looked at.
func (d *Driver) cancelStep(ctx context.Context, queue, id string, state broker.JobState, cursor string) (bool, string, error) {
	k := d.keys(queue)
	v, err := cancelScript.Run(ctx, d.rdb, slices.Concat([]string{k.stream, k.canceled, k.wake}, k.groups.List(), k.limits.List()),
		d.cfg.Group, state.String(), id, cursor, cancelStretch, k.cancels)
	if err != nil {
		return false, "", err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return false, "", fmt.Errorf("%s: unexpected reply %v", cancelScript.Name(), v)
	}
	found, _ := r[0].(int64)
	next, _ := r[1].(string)
	return found == 1, next, nil
}

// WatchCancels returns the jobs of queues cancelled while in flight, as
// CancelJob publishes them, until ctx ends: one SUBSCRIBE connection for
// all of queues. It implements broker.Canceler.
func (d *Driver) WatchCancels(ctx context.Context, queues ...string) (<-chan broker.CanceledJob, error) {
	ch, err := cancels.Watch(ctx, d.rdb, d.cfg.Prefix, queues...)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	return ch, nil
}
