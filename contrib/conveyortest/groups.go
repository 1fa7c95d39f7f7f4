package conveyortest

import (
	"cmp"
	"slices"

	"github.com/conveyorq/conveyor/broker"
)

// FIFO groups (broker.Message.Group) behave as the Redis drivers' do
// (internal/groups, docs/ordering.md): a group admits at most its limit of
// jobs at once, wherever they are (ready, in flight, or a retry's timer);
// the others wait in the group's line, outside the ready list, in enqueue
// order. A retry, a postpone, a release or a lease expiry keeps a job
// admitted. Its admission ends when the job ends (acked, discarded by its
// holder or as poison, purged, cancelled), and each end
// lets the next waiting jobs of its group in at the back of the ready
// list, so that groups take turns. Every call runs under d.mu.

// group is the state of one group of a queue, kept while it has a job
// admitted or waiting.
type group struct {
	admitted int
	limit    int      // the latest job's GroupLimit, at least 1
	line     []*entry // the jobs waiting, in enqueue order
}

// hold takes e, a job of a group (e.msg.Group) with limit l: admitted at
// the back of the ready list when the group has room, else put at the end
// of the group's line. A limit higher than the group's first admits those
// already waiting. The caller made sure no grouped job of q holds e's ID.
func (q *queue) hold(e *entry, l int) {
	g := q.groups[e.msg.Group]
	if g == nil {
		g = &group{}
		q.groups[e.msg.Group] = g
	}
	g.limit = l
	q.pump(g)
	q.grouped[e.msg.ID] = e
	// After pump, a group with room has nobody waiting.
	if g.admitted < g.limit {
		q.admit(g, e)
		return
	}
	g.line = append(g.line, e)
}

// admit lets e into g and onto the back of the ready list.
func (q *queue) admit(g *group, e *entry) {
	g.admitted++
	e.admitted = true
	q.ready = append(q.ready, e)
}

// pump admits g's waiting jobs, oldest first, while g has room, and
// returns how many it admitted.
func (q *queue) pump(g *group) int {
	n := 0
	for g.admitted < g.limit && len(g.line) > 0 {
		e := g.line[0]
		g.line[0] = nil
		g.line = g.line[1:]
		q.admit(g, e)
		n++
	}
	return n
}

// release ends the admission of each job of es that holds one, and lets
// the next waiting jobs of their groups in, the groups in the order their
// first job comes in es, as the Redis drivers' release does. Jobs that
// were never admitted (ungrouped, re-driven, a cron fire) are passed over.
// A group left with nothing admitted is forgotten. It reports whether a job
// joined the ready list.
func (q *queue) release(es ...*entry) bool {
	var order []string
	seen := map[string]bool{}
	for _, e := range es {
		if !e.admitted {
			continue
		}
		e.admitted = false
		delete(q.grouped, e.msg.ID)
		if !seen[e.msg.Group] {
			seen[e.msg.Group] = true
			order = append(order, e.msg.Group)
		}
		q.groups[e.msg.Group].admitted--
	}
	joined := false
	for _, name := range order {
		g := q.groups[name]
		if q.pump(g) > 0 {
			joined = true
		}
		if g.admitted == 0 {
			// Nothing admitted, so nothing waits.
			delete(q.groups, name)
		}
	}
	return joined
}

// unline removes the job id from its group's line, if it waits in one,
// and reports whether it did. Its group keeps the jobs admitted, so it
// is not forgotten.
func (q *queue) unline(id string) bool {
	e := q.grouped[id]
	if e == nil || e.admitted {
		return false
	}
	g := q.groups[e.msg.Group]
	if i := slices.Index(g.line, e); i >= 0 {
		g.line = slices.Delete(g.line, i, i+1)
	}
	delete(q.grouped, id)
	return true
}

// waitingInLine returns the jobs waiting in q's groups' lines, in enqueue
// order.
func (q *queue) waitingInLine() []*entry {
	var out []*entry
	for _, g := range q.groups {
		out = append(out, g.line...)
	}
	slices.SortFunc(out, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// inLine returns the number of jobs waiting in q's groups' lines.
func (q *queue) inLine() int {
	n := 0
	for _, g := range q.groups {
		n += len(g.line)
	}
	return n
}

// checkGroupDue refuses a grouped message due after now by the driver's
// clock. broker.ValidateMessage judges by the system clock, which a fake
// Clock need not follow: a Delay on a clock behind it would slip through,
// and a test would pass that the Redis drivers fail.
func checkGroupDue(m *broker.Message, nowMs int64) error {
	if m.Group != "" && dueMs(m.RunAt) > nowMs {
		return &broker.MessageError{ID: m.ID, Field: "Group", Reason: "a grouped message cannot be delayed: enqueue it when it is due"}
	}
	return nil
}

// waitsInLine reports the group in whose line job id of queue waits; ok
// is false when it is not waiting in one.
func (d *Driver) waitsInLine(queue, id string) (name string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queues[queue]
	if q == nil {
		return "", false
	}
	e := q.grouped[id]
	if e == nil || e.admitted {
		return "", false
	}
	return e.msg.Group, true
}
