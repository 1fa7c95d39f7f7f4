package list

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/script"
)

// Enqueue stores msgs: one enqueue.lua call per queue (all or none of that
// queue's messages), all of them in one round trip. Every message is
// validated first; if one is invalid nothing is stored. A message with a
// RunAt after now (Redis time) is delayed until then.
//
// Messages of different queues cannot be stored atomically together (their
// keys may live on different cluster nodes): when one queue refuses its
// batch (broker.ErrQueueFull) the other queues' batches are still stored.
func (d *Driver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	single := true
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("list: enqueue: message %d is nil: %w", i, broker.ErrInvalidMessage)
		}
		if err := broker.ValidateMessage(m); err != nil {
			return fmt.Errorf("list: enqueue: %w", err)
		}
		single = single && m.Queue == msgs[0].Queue
	}
	now := time.Now()
	if single && d.cfg.MaxLen == 0 && !anyDelayed(msgs) {
		// Nothing to check and nowhere else to go: a plain LPUSH is as
		// atomic as the script and costs Redis and the round trip less.
		q := msgs[0].Queue
		if err := d.client.LPush(ctx, d.keys(q).ready, d.values(msgs, now)...).Err(); err != nil {
			return fmt.Errorf("list: enqueue %q: %w", q, err)
		}
		return nil
	}
	if single {
		q := msgs[0].Queue
		_, err := enqueueScript.Run(ctx, d.client, d.keys(q).enqueue, d.enqueueArgs(msgs, now)...)
		if err != nil {
			return fmt.Errorf("list: enqueue %q: %w", q, err)
		}
		return nil
	}
	return d.enqueueMany(ctx, msgs, now)
}

// enqueueMany runs one script call per queue in a single pipeline, by SHA,
// and once more by full text for the calls the server had no script for.
func (d *Driver) enqueueMany(ctx context.Context, msgs []*broker.Message, now time.Time) error {
	type group struct {
		queue string
		msgs  []*broker.Message
		args  []any
		cmd   *redis.Cmd
	}
	var groups []*group
	byQueue := make(map[string]*group)
	for _, m := range msgs {
		g := byQueue[m.Queue]
		if g == nil {
			g = &group{queue: m.Queue}
			byQueue[m.Queue] = g
			groups = append(groups, g)
		}
		g.msgs = append(g.msgs, m)
	}
	pipe := d.client.Pipeline()
	for _, g := range groups {
		g.args = d.enqueueArgs(g.msgs, now)
		g.cmd = enqueueScript.EvalSha(ctx, pipe, d.keys(g.queue).enqueue, g.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below

	var again []*group
	for _, g := range groups {
		if script.IsNoScript(g.cmd.Err()) {
			again = append(again, g)
		}
	}
	if len(again) > 0 {
		pipe = d.client.Pipeline()
		for _, g := range again {
			g.cmd = enqueueScript.Eval(ctx, pipe, d.keys(g.queue).enqueue, g.args...)
		}
		_, _ = pipe.Exec(ctx)
	}

	var errs *multierror.Error
	for _, g := range groups {
		if _, err := enqueueScript.Result(g.cmd); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("list: enqueue %q: %w", g.queue, err))
		}
	}
	return errs.ErrorOrNil()
}

// enqueueArgs builds enqueue.lua's ARGV: the cap, then run-at and the
// stored form of each message.
func (d *Driver) enqueueArgs(msgs []*broker.Message, now time.Time) []any {
	args := make([]any, 1, 1+2*len(msgs))
	args[0] = d.cfg.MaxLen
	for _, m := range msgs {
		var at int64
		if !m.RunAt.IsZero() {
			at = max(m.RunAt.UnixMilli(), 0) // before 1970: run now
		}
		args = append(args, at, stored(m, now))
	}
	return args
}

// values returns the stored form of each message, for LPUSH.
func (d *Driver) values(msgs []*broker.Message, now time.Time) []any {
	vs := make([]any, len(msgs))
	for i, m := range msgs {
		vs[i] = stored(m, now)
	}
	return vs
}

// stored encodes m with deliveries 1: a waiting message carries the count of
// its next delivery, so that fetch leases it as it is (lua/lib.lua says why).
// A message without EnqueuedAt is stamped with now, on a copy: the caller's
// message is left as it was.
func stored(m *broker.Message, now time.Time) []byte {
	if m.EnqueuedAt.IsZero() {
		c := *m
		c.EnqueuedAt = now
		return codec.Encode(&c, 1)
	}
	return codec.Encode(m, 1)
}

func anyDelayed(msgs []*broker.Message) bool {
	for _, m := range msgs {
		if !m.RunAt.IsZero() {
			return true
		}
	}
	return false
}
