package conveyortest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// The driver's timers behave as the Redis drivers' do: a timer is an entry
// under its ID, due at a time in unix milliseconds rounded up (by the
// driver's clock), moved to the ready list only by Promote, earliest first,
// ties by ID.

// maxPage caps the timers or records one call returns, as the Redis
// drivers do.
const maxPage = 1000

// maxAhead is the furthest ahead a timer may be moved.
const maxAhead = 100 * 365 * 24 * time.Hour

// dueMs is t in unix milliseconds rounded up, so that nothing is due
// before t; the zero time and times before 1970 are 0.
func dueMs(t time.Time) int64 {
	if t.IsZero() || t.UnixNano() <= 0 {
		return 0
	}
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 != 0 {
		ms++
	}
	return ms
}

// head returns the due time of q's earliest timer; ok is false when none.
func (q *queue) head() (due int64, ok bool) {
	for _, e := range q.timers {
		if !ok || e.due < due {
			due, ok = e.due, true
		}
	}
	return due, ok
}

// putTimer stores e as the timer id, due at due, and wakes the watchers
// when it is now the earliest; the caller made sure id is free.
func (q *queue) putTimer(id string, e *entry, due int64) {
	head, ok := q.head()
	e.due = due
	q.timers[id] = e
	if !ok || due < head {
		q.wakeWatchers()
	}
}

func (q *queue) wakeWatchers() {
	for ch := range q.watchers {
		select {
		case ch <- struct{}{}:
		default: // a wake-up waits already
		}
	}
}

// freeTimerID returns the timer ID for a retry of message id: id when
// free, else the first free id#r<n>, else "" (the retry goes to ready).
func (q *queue) freeTimerID(id string) string {
	if q.timers[id] == nil {
		return id
	}
	for i := 1; i <= 16; i++ {
		if v := id + "#r" + strconv.Itoa(i); q.timers[v] == nil {
			return v
		}
	}
	return ""
}

// sortedTimers returns q's timer IDs, earliest due first.
func (q *queue) sortedTimers() []string {
	ids := make([]string, 0, len(q.timers))
	for id := range q.timers {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(cmp.Compare(q.timers[a].due, q.timers[b].due), strings.Compare(a, b))
	})
	return ids
}

func checkTimerID(queue, id string) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return err
	}
	return broker.ValidateMessage(&broker.Message{ID: id, Kind: "timer", Queue: queue})
}

// Promote moves up to max due timers of queue to its ready list, earliest
// first.
func (d *Driver) Promote(ctx context.Context, queue string, max int) (broker.Promotion, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return broker.Promotion{}, err
	}
	if max < 1 {
		return broker.Promotion{}, fmt.Errorf("conveyortest: promote: max %d is not positive", max)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.promote(d.queue(queue), max), nil
}

// promote moves up to most due timers of q to its ready list; d.mu is held.
func (d *Driver) promote(q *queue, most int) broker.Promotion {
	now := d.Now()
	dueBy := now.UnixMilli()
	most = min(most, maxPage)
	n := 0
	var late time.Duration
	for _, id := range q.sortedTimers() {
		e := q.timers[id]
		if n == most || e.due > dueBy {
			break
		}
		if n == 0 {
			late = max(0, now.Sub(time.UnixMilli(e.due)))
		}
		n++
		delete(q.timers, id)
		q.ready = append(q.ready, e)
	}
	if n > 0 {
		q.notify()
	}
	p := broker.Promotion{Promoted: n, Next: -1, Late: late}
	if head, ok := q.head(); ok {
		p.Next = max(0, time.UnixMilli(head).Sub(now))
	}
	return p
}

// Cancel removes the pending timer id of queue and reports whether it was
// still pending. A timer that was a grouped job's retry ends the job: the
// next job of its group joins the ready list.
func (d *Driver) Cancel(ctx context.Context, queue, id string) (bool, error) {
	if err := checkTimerID(queue, id); err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	e := q.timers[id]
	if e == nil {
		return false, nil
	}
	delete(q.timers, id)
	if q.release(e) {
		q.notify()
	}
	return true, nil
}

// Reschedule moves the pending timer id of queue to at and reports
// whether it was still pending.
func (d *Driver) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	if err := checkTimerID(queue, id); err != nil {
		return false, err
	}
	if at.Sub(d.Now()) > maxAhead {
		return false, &broker.MessageError{ID: id, Field: "RunAt", Reason: "more than 100 years ahead"}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	e := q.timers[id]
	if e == nil {
		return false, nil
	}
	delete(q.timers, id)
	q.putTimer(id, e, dueMs(at))
	return true, nil
}

// PendingTimers returns up to limit pending timers of queue from offset
// on, earliest due first, and how many are pending.
func (d *Driver) PendingTimers(ctx context.Context, queue string, offset, limit int) ([]*broker.Message, int64, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 {
		return nil, 0, fmt.Errorf("conveyortest: pending timers: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	ids := q.sortedTimers()
	out := make([]*broker.Message, 0, min(limit, maxPage))
	for _, id := range page(ids, offset, min(limit, maxPage)) {
		out = append(out, q.timers[id].message(queue, broker.JobDelayed))
	}
	return out, int64(len(ids)), nil
}

// page returns the items of s from offset on, at most limit of them.
func page[T any](s []T, offset, limit int) []T {
	return s[min(offset, len(s)):min(offset+limit, len(s))]
}

// message returns a copy of e's message as a job of queue in state: a
// delayed one's RunAt is its due time.
func (e *entry) message(queue string, state broker.JobState) *broker.Message {
	m := e.msg
	m.Payload = slices.Clone(m.Payload)
	m.Headers = cloneHeaders(m.Headers)
	m.Queue = queue
	if state == broker.JobDelayed {
		m.RunAt = time.UnixMilli(e.due)
	}
	return &m
}

// WatchTimers returns a channel that receives a value whenever a timer of
// queue becomes the earliest, or the driver's fake clock moves; it is
// closed when ctx ends.
func (d *Driver) WatchTimers(ctx context.Context, queue string) (<-chan struct{}, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	q := d.queue(queue)
	q.watchers[ch] = true
	d.mu.Unlock()
	go func() {
		<-ctx.Done()
		// Sends happen under d.mu, so none can follow the close.
		d.mu.Lock()
		delete(q.watchers, ch)
		close(ch)
		d.mu.Unlock()
	}()
	return ch, nil
}

// EnqueueFire stores msg as a timer due at msg.RunAt unless series
// already stored a fire at that time or later.
func (d *Driver) EnqueueFire(ctx context.Context, series string, m *broker.Message, keep time.Duration) (bool, error) {
	if m == nil {
		return false, &broker.MessageError{Field: "message", Reason: "nil"}
	}
	if err := broker.ValidateMessage(m); err != nil {
		return false, err
	}
	if err := broker.ValidateQueue(series); err != nil {
		return false, fmt.Errorf("conveyortest: fire: series %q: %w", series, err)
	}
	if m.RunAt.IsZero() {
		return false, &broker.MessageError{ID: m.ID, Field: "RunAt", Reason: "a fire needs its time"}
	}
	if m.Group != "" {
		return false, &broker.MessageError{ID: m.ID, Field: "Group", Reason: "a cron fire cannot be in a FIFO group: have its handler enqueue the grouped job"}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(m.Queue)
	now := d.Now()
	at := dueMs(m.RunAt)
	if at > now.Add(time.Minute).UnixMilli() {
		return false, fmt.Errorf("conveyortest: fire at %v is over a minute ahead of the clock", time.UnixMilli(at))
	}
	if f, ok := q.fires[series]; ok && now.Before(f.expires) && f.last >= at {
		return false, nil
	}
	if q.timers[m.ID] != nil {
		return false, nil
	}
	q.fires[series] = fire{last: at, expires: now.Add(max(keep, time.Second))}
	q.putTimer(m.ID, d.newEntry(m), at)
	return true, nil
}

// LastFire returns the last fire time series recorded in queue.
func (d *Driver) LastFire(ctx context.Context, queue, series string) (time.Time, bool, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return time.Time{}, false, err
	}
	if err := broker.ValidateQueue(series); err != nil {
		return time.Time{}, false, fmt.Errorf("conveyortest: last fire: series %q: %w", series, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.queue(queue).fires[series]
	if !ok || !d.Now().Before(f.expires) {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(f.last), true, nil
}
