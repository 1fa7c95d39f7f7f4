package conveyortest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/broker"
	// The name records is the discard store's (discards.go).
	jobrecords "github.com/conveyorq/conveyor/internal/records"
)

// The driver keeps the records of finished jobs (broker.Records) in
// memory, per queue, under d.mu: an Ack or Discard writes a delivery's
// record in the critical section that settles it, as the Redis drivers'
// settle scripts do, so a settle that fails writes none. Retention is
// judged by the driver's clock: a record is gone once the clock reaches its
// ExpiresAt, so a test on a fake Clock sees it go when it Advances past
// Keep. Times are whole milliseconds, as the Redis drivers store them.

// finished holds one queue's records of finished jobs and the counts of
// what retention dropped.
type finished struct {
	byID map[string]*broker.JobRecord
	// order holds the records soonest to expire first, ties by ID: the
	// order of the Redis drivers' ZSET, so that the same records are
	// dropped and listed in the same order.
	order            []*broker.JobRecord
	expired, dropped int64
}

func byExpiry(a, b *broker.JobRecord) int {
	return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), strings.Compare(a.ID, b.ID))
}

// put stores r, replacing the record of a job with the same ID, and drops
// the soonest to expire while the queue holds more than max.
func (f *finished) put(r *broker.JobRecord, max int) {
	if old := f.byID[r.ID]; old != nil {
		if i, ok := slices.BinarySearchFunc(f.order, old, byExpiry); ok {
			f.order = slices.Delete(f.order, i, i+1)
		}
	}
	i, _ := slices.BinarySearchFunc(f.order, r, byExpiry)
	f.order = slices.Insert(f.order, i, r)
	f.byID[r.ID] = r
	if over := len(f.order) - max; over > 0 {
		f.dropFirst(over)
		f.dropped += int64(over)
	}
}

// expire drops the records whose time ran out by now, counted as expired.
func (f *finished) expire(now time.Time) {
	n := 0
	for n < len(f.order) && !f.order[n].ExpiresAt.After(now) {
		n++
	}
	f.dropFirst(n)
	f.expired += int64(n)
}

// dropFirst drops the n records soonest to expire.
func (f *finished) dropFirst(n int) {
	for _, r := range f.order[:n] {
		delete(f.byID, r.ID)
	}
	f.order = slices.Delete(f.order, 0, n)
}

// finishedOf returns queue's records after retention by now, nil when it
// holds none; d.mu is held. A queue whose last record expired forgets its
// counts too, as the Redis drivers' keys expire with their latest record.
func (d *Driver) finishedOf(queue string, now time.Time) *finished {
	f := d.done[queue]
	if f == nil {
		return nil
	}
	f.expire(now)
	if len(f.order) == 0 {
		delete(d.done, queue)
		return nil
	}
	return f
}

// checkFinish returns the deliveries of ds whose record request, if any,
// is one the Redis drivers take, and an error for each of the others: a
// settle that could not write its record does not settle.
func checkFinish(op string, ds []*broker.Delivery) ([]*broker.Delivery, error) {
	var errs []error
	ok := make([]*broker.Delivery, 0, len(ds))
	for _, dl := range ds {
		if dl != nil && dl.Finish != nil {
			// jobrecords.Args holds the Redis drivers' checks; its encoding is
			// not needed here.
			if _, _, err := jobrecords.Args(dl.Finish, dl.ID); err != nil {
				errs = append(errs, &broker.DeliveryError{Delivery: dl, Err: fmt.Errorf("conveyortest: %s: %w", op, err)})
				continue
			}
		}
		ok = append(ok, dl)
	}
	return ok, errors.Join(errs...)
}

// putRecord writes the record dl asks for, if any, finished at now (the
// settle's time) in queue; d.mu is held.
func (d *Driver) putRecord(queue string, dl *broker.Delivery, now time.Time) {
	if dl.Finish == nil {
		return
	}
	at := now.Truncate(time.Millisecond)
	r := cloneRecord(&dl.Finish.Record)
	r.ID = dl.ID
	r.Error = jobrecords.CutError(r.Error)
	r.FinishedAt, r.ExpiresAt = at, at.Add(dl.Finish.Keep.Truncate(time.Millisecond))
	f := d.finishedOf(queue, at)
	if f == nil {
		f = &finished{byID: map[string]*broker.JobRecord{}}
		d.done[queue] = f
	}
	f.put(r, d.recordMax)
}

// cloneRecord returns a copy of r that shares nothing with it.
func cloneRecord(r *broker.JobRecord) *broker.JobRecord {
	c := *r
	c.Result = slices.Clone(r.Result)
	return &c
}

// GetRecord returns the record of job id of queue, nil when there is none
// (never asked for, replaced, or dropped by retention).
func (d *Driver) GetRecord(ctx context.Context, queue, id string) (*broker.JobRecord, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, errors.New("conveyortest: get record: empty job ID")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.finishedOf(queue, d.Now())
	if f == nil || f.byID[id] == nil {
		return nil, nil
	}
	return cloneRecord(f.byID[id]), nil
}

// ListRecords returns up to limit records of queue (at most
// broker.MaxInspectPage) from offset on, the latest to expire first, and
// how many the queue holds.
func (d *Driver) ListRecords(ctx context.Context, queue string, offset, limit int) ([]*broker.JobRecord, int64, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 || limit > broker.MaxInspectPage {
		return nil, 0, fmt.Errorf("conveyortest: list records: offset %d, limit %d: want offset >= 0 and limit 1 to %d", offset, limit, broker.MaxInspectPage)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.finishedOf(queue, d.Now())
	if f == nil {
		return nil, 0, nil
	}
	n := len(f.order)
	out := make([]*broker.JobRecord, 0, max(0, min(limit, n-offset)))
	for i := offset; i < n && len(out) < limit; i++ {
		out = append(out, cloneRecord(f.order[n-1-i]))
	}
	return out, int64(n), nil
}

// RecordStats returns the figures of queue's records.
func (d *Driver) RecordStats(ctx context.Context, queue string) (broker.RecordStats, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return broker.RecordStats{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st := broker.RecordStats{MaxCount: d.recordMax}
	if f := d.finishedOf(queue, d.Now()); f != nil {
		st.Count, st.Expired, st.DroppedByCount = int64(len(f.order)), f.expired, f.dropped
	}
	return st, nil
}
