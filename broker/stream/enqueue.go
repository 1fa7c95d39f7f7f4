package stream

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/script"
)

// Enqueue stores msgs, which may name different queues: one enqueue.lua call
// per queue (per 512 messages), all pipelined in one round trip. Messages of
// one queue are stored in their order. Every message is validated before
// anything is stored. A queue's call is atomic: with MaxLen set, a batch that
// does not fit is refused whole (broker.ErrQueueFull); the other queues'
// batches are still stored.
func (d *Driver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	single := true
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("stream: enqueue: message %d is nil", i)
		}
		if err := broker.ValidateMessage(m); err != nil {
			return fmt.Errorf("stream: enqueue: %w", err)
		}
		if m.Queue != msgs[0].Queue {
			single = false
		}
	}
	if single && len(msgs) <= maxBatch {
		k := d.keys(msgs[0].Queue)
		_, err := enqueueScript.Run(ctx, d.rdb, []string{k.stream, k.delayed}, d.enqueueArgs(msgs)...)
		if err != nil {
			return fmt.Errorf("stream: enqueue: %w", err)
		}
		return nil
	}
	return d.enqueueMany(ctx, msgs)
}

// enqueueCall is one enqueue.lua call: a queue's keys and arguments.
type enqueueCall struct {
	queue string
	keys  []string
	args  []any
	cmd   *redis.Cmd
}

func (d *Driver) enqueueMany(ctx context.Context, msgs []*broker.Message) error {
	// Group by queue, keeping the order of first appearance and, within a
	// queue, the order of msgs.
	byQueue := make(map[string][]*broker.Message)
	var order []string
	for _, m := range msgs {
		if _, ok := byQueue[m.Queue]; !ok {
			order = append(order, m.Queue)
		}
		byQueue[m.Queue] = append(byQueue[m.Queue], m)
	}
	var calls []*enqueueCall
	for _, q := range order {
		k := d.keys(q)
		qm := byQueue[q]
		for len(qm) > 0 {
			n := min(len(qm), maxBatch)
			calls = append(calls, &enqueueCall{queue: q, keys: []string{k.stream, k.delayed}, args: d.enqueueArgs(qm[:n])})
			qm = qm[n:]
		}
	}

	pipe := d.rdb.Pipeline()
	for _, c := range calls {
		c.cmd = enqueueScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var missing []*enqueueCall
	for _, c := range calls {
		if script.IsNoScript(c.cmd.Err()) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		// The server lost or never had the script: send its text.
		pipe := d.rdb.Pipeline()
		for _, c := range missing {
			c.cmd = enqueueScript.Eval(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx)
	}

	var errs *multierror.Error
	for _, c := range calls {
		if _, err := enqueueScript.Result(c.cmd); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("stream: enqueue: queue %q: %w", c.queue, err))
		}
	}
	return errs.ErrorOrNil()
}

// enqueueArgs returns enqueue.lua's ARGV for msgs of one queue.
func (d *Driver) enqueueArgs(msgs []*broker.Message) []any {
	args := make([]any, 0, 2+2*len(msgs))
	args = append(args, d.cfg.Group, strconv.Itoa(d.cfg.MaxLen))
	for _, m := range msgs {
		var at int64
		if !m.RunAt.IsZero() {
			at = m.RunAt.UnixMilli()
		}
		args = append(args, at, codec.Encode(m, 0))
	}
	return args
}
