package brokertest_test

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// The reference driver's broker.QueueDeleter empties a queue's state in
// place (so that its consumers' waits and timer watchers keep working),
// deletes its discard keys in Redis and forgets it. Its mutants break one
// promise each, which DeleteQueue must catch: deleteinflight deletes with
// jobs in flight without force, deletekeepsdiscards leaves the discard
// keys, deletekeepsregistry leaves the queue listed.
var _ broker.QueueDeleter = (*memDriver)(nil)

func (d *memDriver) DeleteQueue(ctx context.Context, queue string, force bool) (broker.QueueDeletion, error) {
	out := broker.QueueDeletion{Queue: queue}
	if err := d.checkQueue(queue); err != nil {
		return out, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	d.sweep(q, time.Now())
	if len(q.inflight) > 0 && !force && d.mutant != "deleteinflight" {
		return out, &broker.InFlightError{Queue: queue, InFlight: int64(len(q.inflight))}
	}
	k := d.discardKeys(queue)
	d.dmu.Lock()
	defer d.dmu.Unlock()
	n, err := d.rdb.LLen(ctx, k.dead).Result()
	if err != nil {
		return out, err
	}
	if d.mutant != "deletekeepsdiscards" {
		if out.Keys, err = d.rdb.Del(ctx, k.dead, k.dropped, k.expired).Result(); err != nil {
			return out, err
		}
	}
	out.Ready, out.InFlight, out.Delayed, out.Discarded = int64(len(q.ready)), int64(len(q.inflight)), int64(len(q.timers)), n
	q.ready, q.unique = nil, nil
	q.timers, q.inflight, q.fires = map[string]*memEntry{}, map[string]*memEntry{}, map[string]memFire{}
	q.processed, q.failed = 0, 0
	q.notify()
	out.Registered = d.known[queue]
	if d.mutant != "deletekeepsregistry" {
		delete(d.known, queue)
	}
	return out, nil
}
