package list

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
	"github.com/conveyorq/conveyor/internal/wake"
)

// Enqueue stores msgs: one enqueue.lua call (or LPUSH) per queue, all or
// none of its messages (duplicates aside; a Redis at its maxmemory refuses
// the whole call), all in one round trip (a plain push that finds its
// queue empty after one that did not adds a second: see push). One call
// holds the server for about a microsecond per message, so split batches
// of many thousands when that pause matters. Every message is
// validated first; if one is invalid nothing is stored. A message with a
// RunAt after now (Redis time) becomes a timer, due then (see Promote); one
// whose ID a pending timer of its queue has, or whose UniqueKey another
// message holds, is refused with a *broker.DuplicateError while the others
// are stored.
//
// Messages of different queues cannot be stored atomically together (their
// keys may live on different cluster nodes): when one queue refuses its
// batch (broker.ErrQueueFull) the other queues' batches are still stored.
func (d *Driver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	single, err := broker.ValidateBatch(msgs)
	if err != nil {
		return fmt.Errorf("list: enqueue: %w", err)
	}
	now := time.Now()
	if d.wait != nil {
		// On one connection per master, followed by WAIT.
		key := func(q string) string { return d.keys(q).ready }
		return d.wait.Enqueue(ctx, msgs, d.reg, key, func(c script.Client, part []*broker.Message, single bool) error {
			return d.enqueue(ctx, c, part, single, now, false)
		})
	}
	return d.enqueue(ctx, d.client, msgs, single, now, true)
}

// enqueue stores msgs, validated, through c; single says they are of one
// queue. With register, a queue's first enqueue by this driver adds it to
// the registry in the same round trip.
func (d *Driver) enqueue(ctx context.Context, c script.Client, msgs []*broker.Message, single bool, now time.Time, register bool) error {
	if !single {
		return d.enqueueMany(ctx, c, msgs, now, register)
	}
	var add *registry.Pending
	if register {
		// After a queue's first enqueue nothing more is sent for it.
		add = d.reg.Pending(msgs[0].Queue)
	}
	if d.cfg.MaxLen == 0 && timers.Plain(msgs) {
		// Nothing to check and nowhere else to go: a plain LPUSH is as
		// atomic as the script and costs Redis and the round trip less.
		return d.push(ctx, c, msgs, now, add)
	}
	keys, args := d.enqueueCall(msgs, now)
	v, err := add.Run(ctx, c, enqueueScript, keys, args...)
	if err != nil {
		return fmt.Errorf("list: enqueue %q: %w", msgs[0].Queue, err)
	}
	return timers.Duplicates(msgs, v).ErrorOrNil()
}

// push LPUSHes msgs, all of one queue, and wakes an idle consumer when
// ready was empty before it (wake.Signal), adding the queue to the registry
// in the same round trip when add is not nil. A push onto jobs already
// waiting wakes no one: the store that put the first of them there set the
// signal, and a consumer that takes a batch and leaves jobs sets it again
// (fetch.lua), so this push's jobs are taken with them.
//
// Whether ready was empty is known only from the LPUSH's reply, so push
// guesses from the queue's last push: after one onto waiting jobs the LPUSH
// goes alone, and the signal follows in a second round trip (signal_if.lua,
// which sets nothing once the queue is deleted) only when that guess was
// wrong or the LPUSH's reply was lost; otherwise the signal goes with the
// LPUSH in one round trip. The LPUSH's outcome is the call's: the signal
// only wakes an idle consumer sooner, and a keeper sets it within a second
// when ready holds messages without it.
func (d *Driver) push(ctx context.Context, c script.Client, msgs []*broker.Message, now time.Time, add *registry.Pending) error {
	q := msgs[0].Queue
	k := d.keys(q)
	push := redis.NewIntCmd(ctx, append([]any{"lpush", k.ready}, d.values(msgs, now)...)...)
	n := int64(len(msgs))
	if add == nil && k.backlog.Load() {
		err := script.Send(ctx, c, push)
		if err == nil && push.Val() > n {
			return nil
		}
		// The next push sends the signal with its LPUSH.
		k.backlog.Store(false)
		if err == nil || script.Unsure(err) {
			// Ready was empty, or the LPUSH may have run: signal, unless
			// the queue is gone meanwhile (a signal must not outlive a
			// deleted queue's keys), even when the caller's context
			// ended. The signal's error is not the call's: see above.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), signalTimeout)
			_ = wake.SignalIf(sctx, c, k.ready, k.wake)
			cancel()
		}
		if err != nil {
			return fmt.Errorf("list: enqueue %q: %w", q, err)
		}
		return nil
	}
	p := c.Pipeline()
	_ = p.Process(ctx, script.Once(push))
	p.ZAdd(ctx, k.wake, redis.Z{Member: wake.Member})
	if add != nil {
		add.Add(ctx, p)
	}
	_ = script.Exec(ctx, p) // each command's error is read below
	if err := push.Err(); err != nil {
		return fmt.Errorf("list: enqueue %q: %w", q, err)
	}
	k.backlog.Store(push.Val() > n)
	if add != nil {
		add.Done(ctx)
	}
	return nil
}

// signalTimeout bounds the wake signal a push sends after its LPUSH.
const signalTimeout = 2 * time.Second

// enqueueMany runs one script call per queue, all in one round trip. A
// queue's messages are not split over several calls: Redis checks its
// memory limit when a script starts, so one call stores all of them or
// none, where a second call could be refused after the first was stored.
func (d *Driver) enqueueMany(ctx context.Context, c script.Client, msgs []*broker.Message, now time.Time, register bool) error {
	var (
		calls  []*script.Call
		groups [][]*broker.Message
		names  []string
	)
	for _, qm := range broker.GroupByQueue(msgs) {
		names = append(names, qm[0].Queue)
		keys, args := d.enqueueCall(qm, now)
		calls = append(calls, &script.Call{Keys: keys, Args: args})
		groups = append(groups, qm)
	}
	var add *registry.Pending
	if register {
		add = d.reg.Pending(names...)
	}
	enqueueScript.RunPipelined(ctx, c, calls, add.Also(ctx)...)
	add.Done(ctx)
	var errs *multierror.Error
	for i, call := range calls {
		if call.Err != nil {
			errs = multierror.Append(errs, &broker.QueueError{Queue: groups[i][0].Queue, Err: fmt.Errorf("list: enqueue: %w", call.Err)})
			continue
		}
		if dups := timers.Duplicates(groups[i], call.Val); dups != nil {
			errs = multierror.Append(errs, dups.Errors...)
		}
	}
	return errs.ErrorOrNil()
}

// enqueueCall builds enqueue.lua's KEYS and ARGV for msgs of one queue:
// the cap and the stride, then five items per message, or seven when some
// message has a group (internal/timers.EnqueueArgs).
func (d *Driver) enqueueCall(msgs []*broker.Message, now time.Time) ([]string, []any) {
	k := d.keys(msgs[0].Queue)
	stride := timers.Stride(msgs)
	args := make([]any, 2, 2+stride*len(msgs))
	args[0], args[1] = d.cfg.MaxLen, stride
	// The full slice expression makes an appended unique key copy the
	// cached KEYS rather than write into them.
	keys := k.enqueue[:len(k.enqueue):len(k.enqueue)]
	return timers.EnqueueArgs(k.timers, keys, args, msgs, stride, func(m *broker.Message) []byte { return stored(m, now) })
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
