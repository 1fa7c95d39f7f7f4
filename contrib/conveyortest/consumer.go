package conveyortest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// Open starts consuming queue.
func (d *Driver) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.queue(queue)
	d.mu.Unlock()
	c := &consumer{d: d, queue: queue, vt: opts.VisibilityTimeoutOrDefault(), closed: make(chan struct{})}
	if opts != nil {
		c.idle = opts.Idle
	}
	return c, nil
}

// consumer fetches and settles the messages of one queue.
type consumer struct {
	d      *Driver
	queue  string
	vt     time.Duration
	idle   func() // ConsumerOptions.Idle, or nil
	once   sync.Once
	closed chan struct{}
}

// Fetch returns between 1 and max ready messages under a lease, waiting
// while there are none.
func (c *consumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	for {
		select {
		case <-c.closed:
			return nil, broker.ErrClosed
		default:
		}
		out, next, wake := c.lease(max, "")
		if len(out) > 0 {
			return out, nil
		}
		if c.idle != nil {
			c.idle()
		}
		if err := c.wait(ctx, next, wake); err != nil {
			return nil, err
		}
	}
}

// lease leases up to max ready messages (only the one with ID id when id
// is set) and returns them, with the next lease deadline of the queue and
// the channel that closes on its next change, for a caller that must wait.
// Each message leased takes a slot of the concurrency limits that apply to
// it; one that finds a limit full waits in the limit's line instead.
func (c *consumer) lease(max int, id string) (out []*broker.Delivery, next time.Time, wake <-chan struct{}) {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(c.queue)
	now := d.Now()
	d.sweep(q, now)
	for i := 0; len(out) < max && i < len(q.ready); {
		e := q.ready[i]
		if id != "" && e.msg.ID != id {
			i++
			continue
		}
		// A message on its last chance is leased alone.
		last := broker.IsLastChance(e.msg.Recoveries, broker.DefaultMaxRecoveries)
		if last && len(out) > 0 {
			break
		}
		q.ready = append(q.ready[:i], q.ready[i+1:]...)
		if class, full := q.full(e); full {
			q.park(e, class)
			if id != "" {
				break
			}
			continue
		}
		q.take(e)
		d.tokens++
		e.token = strconv.FormatInt(d.tokens, 10)
		e.deadline = now.Add(c.vt)
		q.inflight[e.receipt] = e
		out = append(out, &broker.Delivery{Message: e.msg, Receipt: e.receipt, Token: e.token, LeaseDeadline: e.deadline, LastChance: last})
		if last || id != "" {
			break
		}
	}
	return out, q.nextDeadline(), q.wake
}

// wait blocks until the queue changes, the lease deadline next passes, or
// the fetch must end. On a fake clock only Advance brings next: it wakes
// every queue.
func (c *consumer) wait(ctx context.Context, next time.Time, wake <-chan struct{}) error {
	var due <-chan time.Time
	if !next.IsZero() && !c.d.clock.fake() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
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

// settle checks each delivery's lease and applies f to the live ones. f
// reports whether the job ended (acked, discarded, or a cancelled job
// handed back): once all are settled, the deliveries f took out of flight
// give their concurrency limit slots back, and the jobs that ended let the
// next of their groups in, as the Redis drivers' settle scripts do.
func (c *consumer) settle(ds []*broker.Delivery, f func(q *queue, e *entry, dl *broker.Delivery, now time.Time) (ended bool)) error {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(c.queue)
	now := d.Now()
	d.sweep(q, now)
	var errs []error
	var ended, left []*entry
	for _, dl := range ds {
		e := q.inflight[dl.Receipt]
		if e == nil || e.token != dl.Token {
			errs = append(errs, &broker.DeliveryError{Delivery: dl, Err: broker.ErrLeaseLost})
			continue
		}
		if f(q, e, dl, now) {
			ended = append(ended, e)
		}
		if q.inflight[e.receipt] != e {
			left = append(left, e)
		}
	}
	q.giveBack(left...)
	q.release(ended...)
	q.notify()
	return errors.Join(errs...)
}

// Ack settles deliveries as done, writing the record each one whose
// Finish is set asks for (broker.Records) with its settle; a job of a
// group lets the next one in. A delivery whose request the Redis drivers
// would refuse (Keep under 1ms, a Result over broker.MaxRecordResult)
// fails and stays in flight; the others are acked all the same.
func (c *consumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	ds, refused := checkFinish("ack", ds)
	lost := c.settle(ds, func(q *queue, e *entry, dl *broker.Delivery, now time.Time) bool {
		delete(q.inflight, e.receipt)
		q.processed++
		c.d.putRecord(c.queue, dl, now)
		return true
	})
	return errors.Join(flatten(refused, lost)...)
}

// Retry hands dl back to run again at at, counting a failed attempt.
func (c *consumer) Retry(ctx context.Context, dl *broker.Delivery, at time.Time) error {
	return c.requeue(dl, at, true)
}

// Postpone hands dl back to run again at at without counting an attempt.
func (c *consumer) Postpone(ctx context.Context, dl *broker.Delivery, at time.Time) error {
	return c.requeue(dl, at, false)
}

// requeue hands dl back at at: a timer when at is ahead of the clock
// (under the message's ID, or id#r<n> while a timer holds the ID), else
// the end of the ready list. A grouped job keeps its place in its group.
// A job cancelled in flight is removed instead.
func (c *consumer) requeue(dl *broker.Delivery, at time.Time, failed bool) error {
	return c.settle([]*broker.Delivery{dl}, func(q *queue, e *entry, _ *broker.Delivery, now time.Time) bool {
		delete(q.inflight, e.receipt)
		if e.canceled {
			return true
		}
		if failed {
			e.msg.Retries++
			q.failed++
		}
		if due := dueMs(at); due > now.UnixMilli() {
			if id := q.freeTimerID(e.msg.ID); id != "" {
				q.putTimer(id, e, due)
				return false
			}
		}
		q.ready = append(q.ready, e)
		return false
	})
}

// Release hands deliveries back to the ready list at once; a grouped job
// keeps its place in its group. A job cancelled in flight is removed
// instead.
func (c *consumer) Release(ctx context.Context, ds ...*broker.Delivery) error {
	return c.settle(ds, func(q *queue, e *entry, _ *broker.Delivery, _ time.Time) bool {
		delete(q.inflight, e.receipt)
		if e.canceled {
			return true
		}
		q.ready = append(q.ready, e)
		return false
	})
}

// Discard moves dl to the queue's discard queue with reason, writing the
// record dl.Finish asks for, if any, with the settle; a job of a group lets
// the next one in. A request the Redis drivers would refuse fails the
// discard, and dl stays in flight.
func (c *consumer) Discard(ctx context.Context, dl *broker.Delivery, reason string) error {
	ds, refused := checkFinish("discard", []*broker.Delivery{dl})
	if refused != nil {
		return refused
	}
	var err error
	lost := c.settle(ds, func(q *queue, e *entry, _ *broker.Delivery, now time.Time) bool {
		delete(q.inflight, e.receipt)
		q.failed++
		err = c.d.discardLocked(e, reason, now)
		c.d.putRecord(c.queue, dl, now)
		return true
	})
	return errors.Join(lost, err)
}

// Extend pushes the leases of ds to now + ttl. A delivery whose job was
// cancelled is extended too, its holder being alive, and reported with
// broker.ErrJobCanceled, so that the holder stops it.
func (c *consumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	var canceled []error
	lost := c.settle(ds, func(q *queue, e *entry, dl *broker.Delivery, now time.Time) bool {
		e.deadline = now.Add(ttl)
		dl.LeaseDeadline = e.deadline
		if e.canceled {
			canceled = append(canceled, &broker.DeliveryError{Delivery: dl, Err: broker.ErrJobCanceled})
		}
		return false
	})
	return errors.Join(flatten(lost, errors.Join(canceled...))...)
}

// flatten returns the errors of errs, each joined error's one by one, so
// that a batch settle returns one flat list of DeliveryErrors: callers
// unwrap one level.
func flatten(errs ...error) []error {
	var out []error
	for _, e := range errs {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			out = append(out, j.Unwrap()...)
		} else if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// Close stops the consumer; a blocked Fetch returns broker.ErrClosed.
// Deliveries it holds keep their leases.
func (c *consumer) Close(ctx context.Context) error {
	err := broker.ErrClosed
	c.once.Do(func() {
		close(c.closed)
		err = nil
	})
	return err
}
