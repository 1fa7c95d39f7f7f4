package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
	"github.com/conveyorq/conveyor/internal/wake"
)

// Enqueue stores msgs, which may name different queues: one script call
// per queue (enqueue.lua, or enqueue_plain.lua for plain messages of one
// queue without a cap), all pipelined in one round trip. Messages of one queue are
// stored in their order. Every message is validated before anything is
// stored. A queue's call is atomic, all or nothing: with MaxLen set, a batch
// that does not fit is refused whole (broker.ErrQueueFull), and a Redis at
// its maxmemory refuses it whole too; the other queues' batches are still
// stored. One call holds the server for about a microsecond per message, so
// split batches of many thousands when that pause matters. A message with a RunAt after now (Redis time)
// becomes a timer (see Promote); one whose ID a pending timer of its queue
// has, or whose UniqueKey another message holds, is refused with a
// *broker.DuplicateError while the others are stored. A message with a
// Group is appended when its group admits it, else it waits in the group's
// line (internal/groups) until a job of the group ends; one whose ID a
// grouped job of its queue has is refused with a *broker.DuplicateError.
func (d *Driver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	single, err := broker.ValidateBatch(msgs)
	if err != nil {
		return fmt.Errorf("stream: enqueue: %w", err)
	}
	if d.wait != nil {
		// On one connection per master, followed by WAIT.
		key := func(q string) string { return keys.Queue(d.cfg.Prefix, q).Part("stream") }
		return d.wait.Enqueue(ctx, msgs, d.reg, key, func(c script.Client, part []*broker.Message, single bool) error {
			return d.enqueue(ctx, c, part, single, false)
		})
	}
	return d.enqueue(ctx, d.rdb, msgs, single, true)
}

// enqueue stores msgs, validated, through c; single says they are of one
// queue. With register, a queue's first enqueue by this driver adds it to
// the registry in the same round trip.
func (d *Driver) enqueue(ctx context.Context, c script.Client, msgs []*broker.Message, single, register bool) error {
	if !single {
		return d.enqueueMany(ctx, c, msgs, register)
	}
	var add *registry.Pending
	if register {
		// After a queue's first enqueue nothing more is sent for it.
		add = d.reg.Pending(msgs[0].Queue)
	}
	if len(msgs) == 1 && d.cfg.MaxLen == 0 && timers.Plain(msgs) {
		// A stream exists only together with its group: enqueue.lua creates
		// both (a drained stream stays, with its group). So while the
		// stream exists a plain XADD is as safe as the script and cheaper;
		// NOMKSTREAM leaves a missing stream to the script, which creates it.
		// The wake signal (internal/wake) goes in the same round trip: it
		// wakes one consumer sleeping on it; its outcome is not the call's.
		q := keys.Queue(d.cfg.Prefix, msgs[0].Queue)
		xadd := redis.NewCmd(ctx, "xadd", q.Part("stream"), "nomkstream", "*", "m", codec.Encode(msgs[0], 0))
		p := c.Pipeline()
		_ = p.Process(ctx, script.Once(xadd))
		p.ZAdd(ctx, q.Part("wake"), redis.Z{Member: wake.Member})
		if add != nil {
			add.Add(ctx, p)
		}
		_ = script.Exec(ctx, p) // each command's error is read below
		err := xadd.Err()
		if add != nil && add.Done(ctx) {
			add = nil
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, redis.Nil) {
			return fmt.Errorf("stream: enqueue: %w", err)
		}
	}
	ks, args := d.enqueueCall(msgs)
	if d.cfg.MaxLen == 0 && timers.Plain(msgs) {
		// Nothing to check, nothing refused: the short script, with the
		// same ARGV and only the keys it touches (the stream, the wake).
		if _, err := add.Run(ctx, c, enqueuePlainScript, []string{ks[0], ks[3]}, args...); err != nil {
			return fmt.Errorf("stream: enqueue: %w", err)
		}
		return nil
	}
	v, err := add.Run(ctx, c, enqueueScript, ks, args...)
	if err != nil {
		return fmt.Errorf("stream: enqueue: %w", err)
	}
	return timers.Duplicates(msgs, v).ErrorOrNil()
}

// enqueueMany runs one enqueue.lua call per queue, all in one round trip.
// A queue's messages are not split over several calls: Redis checks its
// memory limit when a script starts, so one call stores all of them or
// none, where a second call could be refused after the first was stored.
func (d *Driver) enqueueMany(ctx context.Context, c script.Client, msgs []*broker.Message, register bool) error {
	var (
		calls   []*script.Call
		queues  []string
		batches [][]*broker.Message
	)
	for _, qm := range broker.GroupByQueue(msgs) {
		ks, args := d.enqueueCall(qm)
		calls = append(calls, &script.Call{Keys: ks, Args: args})
		queues = append(queues, qm[0].Queue)
		batches = append(batches, qm)
	}
	var add *registry.Pending
	if register {
		add = d.reg.Pending(queues...)
	}
	enqueueScript.RunPipelined(ctx, c, calls, add.Also(ctx)...)
	add.Done(ctx)
	var errs *multierror.Error
	for i, call := range calls {
		if call.Err != nil {
			errs = multierror.Append(errs, &broker.QueueError{Queue: queues[i], Err: fmt.Errorf("stream: enqueue: %w", call.Err)})
			continue
		}
		if dups := timers.Duplicates(batches[i], call.Val); dups != nil {
			errs = multierror.Append(errs, dups.Errors...)
		}
	}
	return errs.ErrorOrNil()
}

// enqueueCall returns enqueue.lua's KEYS and ARGV for msgs of one queue:
// the group, the cap and the layout, then either each encoded message alone
// (none is delayed or has a unique key or a group: the usual batch, which
// the script appends without reading anything else) or five items per
// message, seven when some message has a group
// (internal/timers.EnqueueArgs). The encoded messages share one buffer.
func (d *Driver) enqueueCall(msgs []*broker.Message) ([]string, []any) {
	t := timers.QueueKeys(d.cfg.Prefix, msgs[0].Queue)
	q := keys.Queue(d.cfg.Prefix, msgs[0].Queue)
	g := groups.QueueKeys(d.cfg.Prefix, msgs[0].Queue)
	// The group keys come before the unique keys EnqueueArgs appends.
	ks := []string{q.Part("stream"), t.Delayed, t.Timers, q.Part("wake"), g.Jobs, g.State, g.Wait, g.Msgs}
	size := 0
	for _, m := range msgs {
		size += codec.Size(m)
	}
	buf := make([]byte, 0, size)
	encode := func(m *broker.Message) []byte {
		start := len(buf)
		buf = codec.Append(buf, m, 0)
		// Capped, so that an append to one message's slice cannot overwrite
		// the next message in the shared buffer.
		return buf[start:len(buf):len(buf)]
	}
	maxLen := strconv.Itoa(d.cfg.MaxLen)
	if timers.Plain(msgs) {
		args := make([]any, 0, 3+len(msgs))
		args = append(args, d.cfg.Group, maxLen, "1")
		for _, m := range msgs {
			args = append(args, encode(m))
		}
		return ks, args
	}
	stride := timers.Stride(msgs)
	args := make([]any, 0, 3+stride*len(msgs))
	args = append(args, d.cfg.Group, maxLen, stride)
	return timers.EnqueueArgs(t, ks, args, msgs, stride, encode)
}
