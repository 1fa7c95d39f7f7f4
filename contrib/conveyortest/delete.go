package conveyortest

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// DeleteQueue deletes queue: its ready, in-flight, delayed and discarded
// jobs, the jobs waiting in its groups' lines and in its concurrency
// limits' lines (counted as ready), the state of its groups, its limits
// and their slots, its records of finished jobs, its counters, unique keys
// and cron records; Queues no longer lists it. Unless force, it
// refuses while jobs of the queue are in flight, with a
// *broker.InFlightError, deleting nothing. Consumers still open on the
// queue go on: a job enqueued after the delete reaches them, and the
// settles of the jobs a forced delete took from flight fail with
// broker.ErrLeaseLost. QueueDeletion.Keys is 0: the driver keeps nothing in
// Redis. It implements broker.QueueDeleter.
func (d *Driver) DeleteQueue(ctx context.Context, queue string, force bool) (broker.QueueDeletion, error) {
	out := broker.QueueDeletion{Queue: queue}
	if err := broker.ValidateQueue(queue); err != nil {
		return out, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q, registered := d.queues[queue]
	if registered {
		d.sweep(q, d.Now())
		if len(q.inflight) > 0 && !force {
			return out, &broker.InFlightError{Queue: queue, InFlight: int64(len(q.inflight))}
		}
	}
	recs, err := d.recs.all(ctx, queue)
	if err != nil {
		return out, err
	}
	if out.Keys, err = d.recs.drop(ctx, queue); err != nil {
		return out, err
	}
	out.Discarded, out.Registered = int64(len(recs)), registered
	delete(d.done, queue)
	// The limits are cleared in place: the queue's state shares the map.
	if !registered {
		clear(d.limits[queue])
		return out, nil
	}
	out.Ready, out.InFlight, out.Delayed = int64(len(q.ready)+q.inLine()+q.limited()), int64(len(q.inflight)), int64(len(q.timers))
	q.ready = nil
	q.timers, q.inflight = map[string]*entry{}, map[string]*entry{}
	q.groups, q.grouped = map[string]*group{}, map[string]*entry{}
	clear(q.limits)
	q.fires, q.unique = map[string]fire{}, map[string]time.Time{}
	q.processed, q.failed = 0, 0
	// The fetches waiting on q look again, and find it empty.
	q.notify()
	delete(d.queues, queue)
	d.deleted[queue] = q
	return out, nil
}
