package conveyortest

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/conveyorq/conveyor/broker"
)

// Concurrency limits (broker.Limiter) behave as the Redis drivers' do
// (internal/limits, docs/concurrency.md). A limit has a class: a kind, or
// "" for the queue as a whole. A fetch gives a job a slot of each limit
// that applies (the queue's, then its kind's); a job that finds one full
// waits in that limit's line (the queue's when both are), outside the
// ready list, taking no slot and counting no attempt. Every end of a
// delivery (ack, discard, retry, postpone, release, a lease that expires,
// a cancelled job's removal) gives its slots back, and each limit it gave
// back to lets its oldest waiting jobs in at the front of the ready list,
// as many as it has room for (slots held counted; jobs let in and not yet
// fetched not). Every call runs under d.mu.

// limit is one concurrency limit of a queue, kept while it has a max, a
// slot held or a job waiting.
type limit struct {
	max  int      // 0: removed, while slots are still held or jobs wait
	held int64    // slots held by deliveries
	line []*entry // the jobs waiting for a slot, oldest first
}

// limitsOf returns the limits of queue name, class -> limit, made on first
// use and never replaced, so that the queue's state and SetLimit share it
// without SetLimit registering the queue; d.mu is held.
func (d *Driver) limitsOf(name string) map[string]*limit {
	ls := d.limits[name]
	if ls == nil {
		ls = map[string]*limit{}
		d.limits[name] = ls
	}
	return ls
}

// full returns the class of the first limit that e, about to be leased,
// finds full: the queue's, then its kind's; ok is false when e may run.
func (q *queue) full(e *entry) (class string, ok bool) {
	for _, c := range classesOf(e) {
		if l := q.limits[c]; l != nil && l.max > 0 && l.held >= int64(l.max) {
			return c, true
		}
	}
	return "", false
}

// classesOf returns the classes of the limits that may apply to e: the
// queue's, then its kind's.
func classesOf(e *entry) []string {
	if e.msg.Kind == "" {
		return []string{""}
	}
	return []string{"", e.msg.Kind}
}

// take gives e, being leased, a slot of each limit that applies to it.
func (q *queue) take(e *entry) {
	for _, c := range classesOf(e) {
		if l := q.limits[c]; l != nil && l.max > 0 {
			l.held++
			e.slots = append(e.slots, c)
		}
	}
}

// park puts e at the end of the line of class c's limit.
func (q *queue) park(e *entry, c string) {
	l := q.limits[c]
	l.line = append(l.line, e)
}

// giveBack gives back the slots of the deliveries es, which ended, and
// lets the oldest waiting jobs of each limit with room in at the front of
// the ready list, the first let in fetched first. It reports whether a job
// was let in.
func (q *queue) giveBack(es ...*entry) bool {
	var order []string
	n := map[string]int64{}
	for _, e := range es {
		for _, c := range e.slots {
			if _, ok := n[c]; !ok {
				order = append(order, c)
			}
			n[c]++
		}
		e.slots = nil
	}
	var in []*entry
	for _, c := range order {
		l := q.limits[c]
		if l == nil {
			continue // deleted with its queue
		}
		l.held = max(0, l.held-n[c])
		in = append(in, q.letIn(c)...)
	}
	q.ready = append(in, q.ready...)
	return len(in) > 0
}

// pumpLimits lets in, for every limit with a free slot and a job waiting, as
// many as it has room for, at the front of the ready list, and reports
// whether it let any in. A job let in takes its slot only when fetched, so
// one removed from the ready list before (a cancel, a purge) leaves a slot
// nothing would give back: what removes ready jobs calls this.
func (q *queue) pumpLimits() bool {
	var in []*entry
	for _, c := range slices.Sorted(maps.Keys(q.limits)) {
		in = append(in, q.letIn(c)...)
	}
	q.ready = append(in, q.ready...)
	return len(in) > 0
}

// letIn takes the oldest waiting jobs of class c's limit off its line, as
// many as it has room for (all when it was removed), and returns them; a
// limit left with no max, no slot held and no job waiting is forgotten.
func (q *queue) letIn(c string) []*entry {
	l := q.limits[c]
	n := len(l.line)
	if l.max > 0 {
		n = min(n, max(0, l.max-int(l.held)))
	}
	in := slices.Clone(l.line[:n])
	clear(l.line[:n])
	l.line = l.line[n:]
	if l.max == 0 && l.held == 0 && len(l.line) == 0 {
		delete(q.limits, c)
	}
	return in
}

// unwait removes the job id from the line it waits in, if it waits in
// one, and returns it.
func (q *queue) unwait(id string) *entry {
	for _, c := range slices.Sorted(maps.Keys(q.limits)) {
		l := q.limits[c]
		for i, e := range l.line {
			if e.msg.ID == id {
				l.line = slices.Delete(l.line, i, i+1)
				if l.max == 0 && l.held == 0 && len(l.line) == 0 {
					delete(q.limits, c)
				}
				return e
			}
		}
	}
	return nil
}

// waitsForSlot reports the class of the limit in whose line job id of
// queue waits; ok is false when it waits in none.
func (d *Driver) waitsForSlot(queue, id string) (class string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c, l := range d.limits[queue] {
		if slices.ContainsFunc(l.line, func(e *entry) bool { return e.msg.ID == id }) {
			return c, true
		}
	}
	return "", false
}

// limitName names the limit of class c in a message.
func limitName(c string) string {
	if c == "" {
		return "the queue's concurrency limit"
	}
	return fmt.Sprintf("the concurrency limit of kind %q", c)
}

// waitingForSlots returns the jobs waiting in q's limits' lines, the
// queue's own line first, then by kind, each oldest first.
func (q *queue) waitingForSlots() []*entry {
	var out []*entry
	for _, c := range slices.Sorted(maps.Keys(q.limits)) {
		out = append(out, q.limits[c].line...)
	}
	return out
}

// limited returns the number of jobs waiting in q's limits' lines.
func (q *queue) limited() int {
	n := 0
	for _, l := range q.limits {
		n += len(l.line)
	}
	return n
}

// SetLimit sets how many jobs of kind (all jobs of the queue when kind is
// "") may run at once on queue, from 1 to broker.MaxLimit, or removes the
// limit when n is 0. A raised limit lets the waiting jobs it has room for
// in at once, at the front of the ready list; a removed one lets them all
// in. Jobs running keep their slots: a lowered limit takes effect as they
// end. The limit is kept in the driver's memory for as long as the driver
// lives, or until DeleteQueue. It implements broker.Limiter.
func (d *Driver) SetLimit(ctx context.Context, queue, kind string, n int) error {
	if err := broker.ValidateLimit(queue, kind, n); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ls := d.limitsOf(queue)
	l := ls[kind]
	if l == nil {
		if n == 0 {
			return nil
		}
		l = &limit{}
		ls[kind] = l
	}
	l.max = n
	// Only a fetch puts a job in a line, and a fetch registers its queue:
	// a queue with jobs waiting has its state.
	if q := d.queues[queue]; q != nil {
		if in := q.letIn(kind); len(in) > 0 {
			q.ready = append(in, q.ready...)
			q.notify()
		}
		return nil
	}
	if l.max == 0 && l.held == 0 && len(l.line) == 0 {
		delete(ls, kind)
	}
	return nil
}

// Limits reports queue's concurrency limits with the slots each holds and
// the jobs waiting for one, the queue's own (Kind "") first, then by kind:
// one for each limit set, and for each one removed while slots were still
// held or jobs waited (Max 0). It implements broker.Limiter.
func (d *Driver) Limits(ctx context.Context, queue string) ([]broker.Limit, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if q := d.queues[queue]; q != nil {
		d.sweep(q, d.Now())
	}
	ls := d.limits[queue]
	out := make([]broker.Limit, 0, len(ls))
	for _, c := range slices.Sorted(maps.Keys(ls)) {
		l := ls[c]
		out = append(out, broker.Limit{Kind: c, Max: l.max, Running: l.held, Waiting: int64(len(l.line))})
	}
	return out, nil
}
