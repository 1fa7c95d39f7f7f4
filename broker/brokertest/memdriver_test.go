package brokertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
)

// memDriver is an in-memory reference driver with every capability. It
// exists to test the suite: a correct driver must pass it, and each mutant
// (a deliberately broken variant) must fail the test that guards what it
// breaks. Only its discard queue lives in Redis, where the suite reads it.
type memDriver struct {
	prefix string
	rdb    redis.UniversalClient
	mutant string

	mu     sync.Mutex
	queues map[string]*memQueue
	tokens atomic.Int64
}

type memQueue struct {
	ready    []*memEntry
	delayed  []*memEntry
	inflight map[string]*memEntry
	wake     chan struct{} // closed and replaced on every change
}

type memEntry struct {
	msg      broker.Message
	token    string
	deadline time.Time
	runAt    time.Time
}

func newMemDriver(rdb redis.UniversalClient, prefix, mutant string) *memDriver {
	return &memDriver{prefix: prefix, rdb: rdb, mutant: mutant, queues: map[string]*memQueue{}}
}

func (d *memDriver) Capabilities() broker.Capabilities {
	return broker.Capabilities{AtLeastOnce: true, FIFO: true, Delay: d.mutant != "nodelaycap", Extend: true, Discard: true}
}

func (d *memDriver) Check(ctx context.Context) error {
	if d.mutant == "checkfails" {
		return errors.New("mutant: check fails")
	}
	return d.rdb.Ping(ctx).Err()
}

// queue returns q's state; d.mu must be held.
func (d *memDriver) queue(name string) *memQueue {
	q := d.queues[name]
	if q == nil {
		q = &memQueue{inflight: map[string]*memEntry{}, wake: make(chan struct{})}
		d.queues[name] = q
	}
	return q
}

func (q *memQueue) notify() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// sweep hands expired leases back and promotes due delayed entries.
func (d *memDriver) sweep(q *memQueue, now time.Time) {
	if d.mutant != "noexpiry" {
		var expired []*memEntry
		for id, e := range q.inflight {
			if !now.Before(e.deadline) {
				delete(q.inflight, id)
				e.msg.Recoveries++
				if e.msg.Recoveries >= broker.DefaultMaxRecoveries && d.mutant != "nopoison" {
					d.poison(e, now)
					continue
				}
				expired = append(expired, e)
			}
		}
		slices.SortFunc(expired, func(a, b *memEntry) int { return a.deadline.Compare(b.deadline) })
		q.ready = append(q.ready, expired...)
	}
	slices.SortStableFunc(q.delayed, func(a, b *memEntry) int { return a.runAt.Compare(b.runAt) })
	for len(q.delayed) > 0 && !now.Before(q.delayed[0].runAt) {
		q.ready = append(q.ready, q.delayed[0])
		q.delayed = q.delayed[1:]
	}
}

// poison moves e to the queue's discard key in Redis, where the suite reads it.
func (d *memDriver) poison(e *memEntry, now time.Time) {
	reason := fmt.Sprintf("%s: lease expired %d times", broker.PoisonReason, e.msg.Recoveries)
	rec := fmt.Appendf(nil, "d1,%d,%d:%s", now.UnixMilli(), len(reason), reason)
	rec = append(rec, codec.Encode(&e.msg, 0)...)
	_ = d.rdb.RPush(context.Background(), keys.Queue(d.prefix, e.msg.Queue).Part("dead"), rec).Err()
}

// next returns the earliest time sweep has work, or zero.
func (q *memQueue) next() time.Time {
	var t time.Time
	for _, e := range q.inflight {
		if t.IsZero() || e.deadline.Before(t) {
			t = e.deadline
		}
	}
	for _, e := range q.delayed {
		if t.IsZero() || e.runAt.Before(t) {
			t = e.runAt
		}
	}
	return t
}

func (d *memDriver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	if d.mutant != "partialbatch" {
		for _, m := range msgs {
			if err := d.validate(m); err != nil {
				return err
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for _, m := range msgs {
		if err := d.validate(m); err != nil {
			return err
		}
		e := &memEntry{msg: *m}
		if d.mutant == "dropheaders" {
			e.msg.Headers = nil
		}
		q := d.queue(m.Queue)
		if m.RunAt.After(now) && d.mutant != "ignorerunat" {
			e.runAt = m.RunAt
			q.delayed = append(q.delayed, e)
		} else {
			q.ready = append(q.ready, e)
		}
		q.notify()
	}
	return nil
}

func (d *memDriver) validate(m *broker.Message) error {
	if m == nil {
		return &broker.MessageError{Field: "message", Reason: "nil"}
	}
	if d.mutant == "novalidate" {
		return nil
	}
	return broker.ValidateMessage(m)
}

func (d *memDriver) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	if d.mutant != "novalidate" {
		if err := broker.ValidateQueue(queue); err != nil {
			return nil, err
		}
	}
	if d.mutant == "leakkey" {
		if err := d.rdb.Set(ctx, keys.Queue(d.prefix, queue).Part("consumers"), 1, 0).Err(); err != nil {
			return nil, err
		}
	}
	return &memConsumer{d: d, queue: queue, vt: opts.VisibilityTimeoutOrDefault(), closed: make(chan struct{})}, nil
}

type memConsumer struct {
	d      *memDriver
	queue  string
	vt     time.Duration
	once   sync.Once
	closed chan struct{}
}

func (c *memConsumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	d := c.d
	for {
		select {
		case <-c.closed:
			return nil, broker.ErrClosed
		default:
		}
		d.mu.Lock()
		q := d.queue(c.queue)
		now := time.Now()
		d.sweep(q, now)
		var out []*broker.Delivery
		for len(out) < max && len(q.ready) > 0 {
			i := 0
			if d.mutant == "lifo" {
				i = len(q.ready) - 1
			}
			e := q.ready[i]
			// The duplicate mutant leaves a first delivery in the ready list.
			if d.mutant != "duplicate" || e.token != "" {
				q.ready = slices.Delete(q.ready, i, i+1)
			}
			e.token = strconv.FormatInt(d.tokens.Add(1), 10)
			if d.mutant == "sametoken" {
				e.token = e.msg.ID
			}
			e.deadline = now.Add(c.vt)
			q.inflight[e.msg.ID] = e
			out = append(out, &broker.Delivery{Message: e.msg, Token: e.token, LeaseDeadline: e.deadline})
			if d.mutant == "onlyone" {
				break
			}
		}
		next, wake := q.next(), q.wake
		d.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if err := c.wait(ctx, next, wake); err != nil {
			return nil, err
		}
	}
}

// wait blocks until the queue changes, next comes, or the fetch must end.
func (c *memConsumer) wait(ctx context.Context, next time.Time, wake <-chan struct{}) error {
	var due <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
	}
	switch c.d.mutant {
	case "polling":
		wake = nil
		t := time.NewTimer(1500 * time.Millisecond)
		defer t.Stop()
		due = t.C
	case "deafcancel":
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-wake:
		case <-due:
		case <-t.C:
		}
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return broker.ErrClosed
	case <-wake:
	case <-due:
	}
	return nil
}

// settle checks each delivery's lease and applies f to the live ones.
func (c *memConsumer) settle(ds []*broker.Delivery, f func(q *memQueue, e *memEntry, d *broker.Delivery, now time.Time)) error {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(c.queue)
	now := time.Now()
	d.sweep(q, now)
	var errs []error
	for _, dl := range ds {
		e := q.inflight[dl.ID]
		if e == nil || (e.token != dl.Token && d.mutant != "nofence") {
			errs = append(errs, &broker.DeliveryError{Delivery: dl, Err: broker.ErrLeaseLost})
			continue
		}
		f(q, e, dl, now)
	}
	q.notify()
	return errors.Join(errs...)
}

func (c *memConsumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	return c.settle(ds, func(q *memQueue, e *memEntry, _ *broker.Delivery, _ time.Time) {
		delete(q.inflight, e.msg.ID)
	})
}

func (c *memConsumer) Retry(ctx context.Context, dl *broker.Delivery, at time.Time) error {
	return c.settle([]*broker.Delivery{dl}, func(q *memQueue, e *memEntry, _ *broker.Delivery, now time.Time) {
		delete(q.inflight, e.msg.ID)
		if c.d.mutant != "retrykeepsattempt" {
			e.msg.Attempt++
		}
		if at.After(now) && c.d.mutant != "ignorerunat" {
			e.runAt = at
			q.delayed = append(q.delayed, e)
		} else {
			q.ready = append(q.ready, e)
		}
	})
}

func (c *memConsumer) Release(ctx context.Context, ds ...*broker.Delivery) error {
	return c.settle(ds, func(q *memQueue, e *memEntry, _ *broker.Delivery, _ time.Time) {
		delete(q.inflight, e.msg.ID)
		if c.d.mutant == "releasecounts" {
			e.msg.Attempt++
		}
		q.ready = append(q.ready, e)
	})
}

func (c *memConsumer) Discard(ctx context.Context, dl *broker.Delivery, reason string) error {
	var rec []byte
	err := c.settle([]*broker.Delivery{dl}, func(q *memQueue, e *memEntry, _ *broker.Delivery, now time.Time) {
		if c.d.mutant != "discardkeeps" {
			delete(q.inflight, e.msg.ID)
		}
		rec = fmt.Appendf(nil, "d1,%d,%d:%s", now.UnixMilli(), len(reason), reason)
		rec = append(rec, codec.Encode(&e.msg, 0)...)
	})
	if err != nil || rec == nil {
		return err
	}
	return c.d.rdb.RPush(ctx, keys.Queue(c.d.prefix, c.queue).Part("dead"), rec).Err()
}

func (c *memConsumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	return c.settle(ds, func(q *memQueue, e *memEntry, dl *broker.Delivery, now time.Time) {
		if c.d.mutant != "extendnoop" {
			e.deadline = now.Add(ttl)
		}
		dl.LeaseDeadline = now.Add(ttl)
	})
}

func (c *memConsumer) Close(ctx context.Context) error {
	err := broker.ErrClosed
	if c.d.mutant == "closenoop" {
		return nil
	}
	c.once.Do(func() {
		close(c.closed)
		err = nil
	})
	return err
}
