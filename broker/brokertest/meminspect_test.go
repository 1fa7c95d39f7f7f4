package brokertest_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// The reference driver's Inspector reads its in-memory state (the discard
// queue from Redis, through its broker.Discards), plainly: each call holds
// d.mu. Its mutants break one promise each, which an Inspect test must
// catch.
var _ broker.Inspector = (*memDriver)(nil)

func (d *memDriver) Queues(ctx context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.known)), nil
}

func (d *memDriver) QueueSizes(ctx context.Context, queues ...string) ([]broker.QueueSizes, error) {
	for _, q := range queues {
		if err := d.checkQueue(q); err != nil {
			return nil, err
		}
	}
	out := make([]broker.QueueSizes, len(queues))
	for i, name := range queues {
		st, err := d.DiscardStats(ctx, name)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		q := d.queue(name)
		d.sweep(q, time.Now())
		out[i] = broker.QueueSizes{
			Queue: name, Ready: int64(len(q.ready)), InFlight: int64(len(q.inflight)), Delayed: int64(len(q.timers)),
			Discarded: st.Count, Processed: q.processed, Failed: q.failed, Discards: st,
		}
		if d.mutant == "sizesnoinflight" {
			out[i].InFlight = 0
		}
		d.mu.Unlock()
	}
	return out, nil
}

func (d *memDriver) checkInspect(queue string, state broker.JobState) error {
	if err := d.checkQueue(queue); err != nil {
		return err
	}
	if !state.Valid() {
		return fmt.Errorf("mem: %v is not a job state", state)
	}
	return nil
}

// jobOf copies e's message into a job of queue in state.
func jobOf(queue string, state broker.JobState, e *memEntry) *broker.JobInfo {
	m := e.msg
	m.Payload = slices.Clone(m.Payload)
	m.Headers = maps.Clone(m.Headers)
	m.Queue = queue
	return &broker.JobInfo{Message: m, State: state}
}

// states returns the entries of q in state (ready, in flight, delayed), in
// the state's order; d.mu is held.
func (d *memDriver) entries(q *memQueue, state broker.JobState) []*memEntry {
	switch state {
	case broker.JobReady:
		out := slices.Clone(q.ready)
		if d.mutant == "readylifo" {
			slices.Reverse(out)
		}
		return out
	case broker.JobInFlight:
		out := slices.Collect(maps.Values(q.inflight))
		slices.SortFunc(out, func(a, b *memEntry) int {
			return cmp.Or(a.deadline.Compare(b.deadline), strings.Compare(a.receipt, b.receipt))
		})
		return out
	}
	var out []*memEntry
	for _, id := range d.sortedTimers(q) {
		out = append(out, q.timers[id])
	}
	return out
}

func (d *memDriver) ListJobs(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	if err := d.checkInspect(queue, state); err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 || limit > broker.MaxInspectPage {
		return nil, 0, fmt.Errorf("mem: list jobs: offset %d, limit %d", offset, limit)
	}
	if state == broker.JobDiscarded {
		recs, total, err := d.ListDiscarded(ctx, queue, offset, limit)
		if err != nil {
			return nil, 0, err
		}
		out := make([]*broker.JobInfo, len(recs))
		for i, r := range recs {
			out[i] = &broker.JobInfo{Message: r.Message, State: state, Reason: r.Reason, DiscardedAt: r.DiscardedAt, Raw: r.Raw}
		}
		return out, total, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	d.sweep(q, time.Now())
	es := d.entries(q, state)
	page := es[min(offset, len(es)):min(offset+limit, len(es))]
	out := make([]*broker.JobInfo, len(page))
	for i, e := range page {
		out[i] = d.info(queue, state, e)
	}
	return out, int64(len(es)), nil
}

// info is e as a job in state; d.mu is held.
func (d *memDriver) info(queue string, state broker.JobState, e *memEntry) *broker.JobInfo {
	j := jobOf(queue, state, e)
	switch state {
	case broker.JobInFlight:
		j.LeaseDeadline = e.deadline
	case broker.JobDelayed:
		j.RunAt = time.UnixMilli(e.due)
	}
	return j
}

func (d *memDriver) FindJob(ctx context.Context, queue string, state broker.JobState, id string) (*broker.JobInfo, error) {
	if err := d.checkInspect(queue, state); err != nil {
		return nil, err
	}
	if err := d.validate(&broker.Message{ID: id, Kind: "job", Queue: queue}); err != nil {
		return nil, err
	}
	if state == broker.JobDiscarded {
		r, err := d.GetDiscarded(ctx, queue, id)
		if err != nil || r == nil {
			return nil, err
		}
		return &broker.JobInfo{Message: r.Message, State: state, Reason: r.Reason, DiscardedAt: r.DiscardedAt, Raw: r.Raw}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	d.sweep(q, time.Now())
	es := d.entries(q, state)
	if d.mutant == "findfirstpage" {
		es = es[:min(len(es), 1000)]
	}
	for _, e := range es {
		if e.msg.ID == id {
			return d.info(queue, state, e), nil
		}
	}
	return nil, nil
}

func (d *memDriver) PurgeReady(ctx context.Context, queue string, max int) (int, error) {
	if err := d.checkQueue(queue); err != nil {
		return 0, err
	}
	if max < 0 {
		return 0, fmt.Errorf("mem: purge ready: max %d is negative", max)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	n := len(q.ready)
	if max > 0 {
		n = min(n, max)
	}
	if d.mutant == "purgenewest" {
		q.ready = q.ready[:len(q.ready)-n]
	} else {
		q.ready = q.ready[n:]
	}
	return n, nil
}

func (d *memDriver) PurgeDelayed(ctx context.Context, queue string, max int) (int, error) {
	if err := d.checkQueue(queue); err != nil {
		return 0, err
	}
	if max < 0 {
		return 0, fmt.Errorf("mem: purge delayed: max %d is negative", max)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	ids := d.sortedTimers(q)
	if max > 0 {
		ids = ids[:min(len(ids), max)]
	}
	for _, id := range ids {
		delete(q.timers, id)
	}
	return len(ids), nil
}
