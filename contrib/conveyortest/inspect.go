package conveyortest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/conveyorq/conveyor/broker"
	jobrecords "github.com/conveyorq/conveyor/internal/records"
)

// The driver's broker.Inspector reads its in-memory state, each call under
// d.mu, so every read is atomic.

// Queues returns the queues enqueued to or opened, sorted.
func (d *Driver) Queues(ctx context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.queues)), nil
}

// QueueSizes returns the sizes and counters of each queue, in the order
// given. Jobs waiting in their group's line count as Grouped, those
// waiting for a slot of a concurrency limit as Limited, as the Redis
// drivers count them.
func (d *Driver) QueueSizes(ctx context.Context, queues ...string) ([]broker.QueueSizes, error) {
	for _, q := range queues {
		if err := broker.ValidateQueue(q); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]broker.QueueSizes, len(queues))
	for i, name := range queues {
		q := d.queue(name)
		d.sweep(q, d.Now())
		st, err := d.discardStats(ctx, name)
		if err != nil {
			return nil, err
		}
		out[i] = broker.QueueSizes{
			Queue: name, Ready: int64(len(q.ready)), Grouped: int64(q.inLine()), Limited: int64(q.limited()), InFlight: int64(len(q.inflight)), Delayed: int64(len(q.timers)),
			Discarded: st.Count, Processed: q.processed, Failed: q.failed, Discards: st,
		}
	}
	return out, nil
}

func checkInspect(queue string, state broker.JobState) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return err
	}
	if !state.Valid() {
		return fmt.Errorf("conveyortest: %v is not a job state", state)
	}
	return nil
}

// entries returns the entries of q in state (ready, in flight or
// delayed), in the state's order: ready ones in the order they will be
// fetched, then those waiting in their group's line, in enqueue order,
// then those waiting for a slot of a concurrency limit, the queue's limit
// first, then by kind, each in the order they came; d.mu is held.
func (q *queue) entries(state broker.JobState) []*entry {
	switch state {
	case broker.JobReady:
		return slices.Concat(q.ready, q.waitingInLine(), q.waitingForSlots())
	case broker.JobInFlight:
		out := slices.Collect(maps.Values(q.inflight))
		slices.SortFunc(out, func(a, b *entry) int {
			return cmp.Or(a.deadline.Compare(b.deadline), strings.Compare(a.receipt, b.receipt))
		})
		return out
	}
	out := make([]*entry, 0, len(q.timers))
	for _, id := range q.sortedTimers() {
		out = append(out, q.timers[id])
	}
	return out
}

// info is e as a job of queue in state.
func (e *entry) info(queue string, state broker.JobState) *broker.JobInfo {
	j := &broker.JobInfo{Message: *e.message(queue, state), State: state}
	if state == broker.JobInFlight {
		j.LeaseDeadline = e.deadline
	}
	return j
}

// discardedInfo is a discard record as a job.
func discardedInfo(r *broker.Discarded) *broker.JobInfo {
	return &broker.JobInfo{Message: r.Message, State: broker.JobDiscarded, Reason: r.Reason, DiscardedAt: r.DiscardedAt, Raw: r.Raw}
}

// ListJobs returns up to limit jobs of queue in state from offset on, and
// how many the state holds: ready jobs in the order they will be fetched,
// then those waiting in their group's line, in enqueue order, then those
// waiting for a slot of a concurrency limit; finished jobs
// (records of them) the latest to expire first, as ListRecords returns
// them.
func (d *Driver) ListJobs(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	if err := checkInspect(queue, state); err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 || limit > broker.MaxInspectPage {
		return nil, 0, fmt.Errorf("conveyortest: list jobs: offset %d, limit %d: want offset >= 0 and limit 1 to %d", offset, limit, broker.MaxInspectPage)
	}
	if state == broker.JobDiscarded {
		recs, total, err := d.ListDiscarded(ctx, queue, offset, limit)
		if err != nil {
			return nil, 0, err
		}
		out := make([]*broker.JobInfo, len(recs))
		for i, r := range recs {
			out[i] = discardedInfo(r)
		}
		return out, total, nil
	}
	if state == broker.JobFinished {
		return jobrecords.ListJobs(ctx, d, queue, offset, limit)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	d.sweep(q, d.Now())
	es := q.entries(state)
	sel := page(es, offset, limit)
	out := make([]*broker.JobInfo, len(sel))
	for i, e := range sel {
		out[i] = e.info(queue, state)
	}
	return out, int64(len(es)), nil
}

// FindJob returns the job id of queue if it is in state, nil when not.
func (d *Driver) FindJob(ctx context.Context, queue string, state broker.JobState, id string) (*broker.JobInfo, error) {
	if err := checkInspect(queue, state); err != nil {
		return nil, err
	}
	if err := broker.ValidateMessage(&broker.Message{ID: id, Kind: "job", Queue: queue}); err != nil {
		return nil, err
	}
	if state == broker.JobDiscarded {
		r, err := d.GetDiscarded(ctx, queue, id)
		if err != nil || r == nil {
			return nil, err
		}
		return discardedInfo(r), nil
	}
	if state == broker.JobFinished {
		r, err := d.GetRecord(ctx, queue, id)
		if err != nil || r == nil {
			return nil, err
		}
		return jobrecords.Info(queue, r), nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	d.sweep(q, d.Now())
	for _, e := range q.entries(state) {
		if e.msg.ID == id {
			return e.info(queue, state), nil
		}
	}
	return nil, nil
}

// PurgeReady deletes up to max jobs of the ready list of the queue name
// (0: all it holds), next-to-run first. A grouped job purged ends: the
// next jobs of its group join the back of the ready list and stay there.
// Jobs waiting in their group's line or for a slot of a concurrency limit
// are not purged; those with a free slot join the front of the ready list.
func (d *Driver) PurgeReady(ctx context.Context, name string, max int) (int, error) {
	return d.purge(name, max, func(q *queue, n int) int {
		n = min(n, len(q.ready))
		purged := slices.Clone(q.ready[:n])
		q.ready = slices.Delete(q.ready, 0, n)
		released := q.release(purged...)
		if q.pumpLimits() || released {
			q.notify()
		}
		return n
	})
}

// PurgeDelayed deletes up to max pending timers of the queue name (0: all),
// earliest due first. A timer that was a grouped job's retry ends the job:
// the next job of its group joins the ready list.
func (d *Driver) PurgeDelayed(ctx context.Context, name string, max int) (int, error) {
	return d.purge(name, max, func(q *queue, n int) int {
		ids := q.sortedTimers()
		ids = ids[:min(n, len(ids))]
		purged := make([]*entry, len(ids))
		for i, id := range ids {
			purged[i] = q.timers[id]
			delete(q.timers, id)
		}
		if q.release(purged...) {
			q.notify()
		}
		return len(ids)
	})
}

// purge checks a purge's arguments and deletes up to max jobs (0: all)
// with del.
func (d *Driver) purge(name string, max int, del func(q *queue, n int) int) (int, error) {
	if err := broker.ValidateQueue(name); err != nil {
		return 0, err
	}
	if max < 0 {
		return 0, fmt.Errorf("conveyortest: purge: max %d is negative", max)
	}
	if max == 0 {
		max = int(^uint(0) >> 1)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return del(d.queue(name), max), nil
}
