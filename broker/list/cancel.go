package list

import (
	"cmp"
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/cancels"
)

var _ broker.Canceler = (*Driver)(nil)

// cancelStretch is how many messages one cancel.lua call looks at.
const cancelStretch = 500

// CancelJob cancels the job id of queue and reports the state it was in
// (0: none held it). A delayed job's timer is removed; a ready job is
// removed from the ready list; an in-flight delivery is marked, its ID
// published on the queue's cancel channel, and its holder ends it (see
// broker.Canceler). Finding a ready or in-flight job walks the ready list
// (newest first) and the inflight HASH (HSCAN), 500 members per script
// call: O(jobs in the state). It implements broker.Canceler.
func (d *Driver) CancelJob(ctx context.Context, queue, id string) (broker.JobState, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("list: cancel job: %w", err)
	}
	k := d.keys(queue)
	step := func(ctx context.Context, queue, id string, state broker.JobState, cursor string) (bool, string, error) {
		v, err := cancelScript.Run(ctx, d.client, k.cancel, state.String(), id, cmp.Or(cursor, "0"), cancelStretch, k.cancels)
		if err != nil {
			return false, "", err
		}
		r, ok := v.([]any)
		if !ok || len(r) != 2 {
			return false, "", fmt.Errorf("cancel.lua replied %v", v)
		}
		found, _ := r[0].(int64)
		next, _ := r[1].(string)
		return found == 1, next, nil
	}
	st, err := cancels.Cancel(ctx, d.Methods, step, queue, id)
	if err != nil {
		return 0, fmt.Errorf("list: cancel job %q of %q: %w", id, queue, err)
	}
	return st, nil
}

// WatchCancels returns the jobs of queues cancelled while in flight, as
// they are published, until ctx ends. It implements broker.Canceler.
func (d *Driver) WatchCancels(ctx context.Context, queues ...string) (<-chan broker.CanceledJob, error) {
	ch, err := cancels.Watch(ctx, d.client, d.cfg.Prefix, queues...)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	return ch, nil
}
