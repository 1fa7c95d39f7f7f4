package brokertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

func groups(c broker.Capabilities) bool   { return c.Groups && c.AtLeastOnce && c.Delay && c.Discard }
func noGroups(c broker.Capabilities) bool { return !c.Groups }

// testGroupUnsupported proves that a driver without Capabilities.Groups
// refuses a grouped message with ErrUnsupported and stores nothing of the
// call, rather than run it out of order.
func testGroupUnsupported(t *testing.T, e *env) {
	const q = "group-unsupported"
	c := Open(t, e.d, q, nil)
	err := e.d.Enqueue(Context(t, 10*time.Second), []*broker.Message{NewMessage(q, 1), grouped(q, 2, "g", 0)})
	if !errors.Is(err, broker.ErrUnsupported) {
		t.Fatalf("Enqueue of a grouped message = %v, want broker.ErrUnsupported", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
}

// groupLease is the lease of the group tests' consumers that must not
// lose one.
const groupLease = 30 * time.Second

// grouped returns message i of queue in group g with limit n.
func grouped(queue string, i int, g string, n int) *broker.Message {
	m := NewMessage(queue, i)
	m.Group, m.GroupLimit = g, n
	return m
}

// fetchIDs fetches what c has now (at most max), within wait, and returns
// the deliveries by ID.
func fetchIDs(t *testing.T, c broker.Consumer, max int, wait time.Duration) map[string]*broker.Delivery {
	t.Helper()
	out := map[string]*broker.Delivery{}
	for _, d := range Fetch(t, c, max, wait) {
		out[d.ID] = d
	}
	return out
}

// wantIDs fails t unless got holds exactly the IDs want.
func wantIDs(t *testing.T, when string, got map[string]*broker.Delivery, want ...string) {
	t.Helper()
	ids := make([]string, 0, len(got))
	for id := range got {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("%s: delivered %v, want %v", when, ids, want)
	}
}

// testGroupOrder proves a FIFO group: one job of a group is out at a time,
// in enqueue order; a retry (now and later), a release and a lease expiry
// keep the job's place (the group waits for it); an ack and a discard let
// the next one in; ungrouped jobs and other groups are not held back; the
// group carries its Group to the consumer; nothing is left in Redis.
func testGroupOrder(t *testing.T, e *env) {
	const q = "group-order"
	ctx := Context(t, 60*time.Second)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	id := func(i int) string { return NewMessage(q, i).ID }

	Enqueue(t, e.d, grouped(q, 1, "a", 0), grouped(q, 2, "a", 0), grouped(q, 3, "b", 0), grouped(q, 4, "a", 0),
		NewMessage(q, 5), grouped(q, 6, "b", 0))
	got := fetchIDs(t, c, 10, 5*time.Second)
	wantIDs(t, "first fetch", got, id(1), id(3), id(5))
	if g := got[id(1)].Message.Group; g != "a" {
		t.Fatalf("delivered Group = %q, want %q (%+v)", g, "a", got[id(1)].Message)
	}
	if got[id(5)].Message.Group != "" {
		t.Fatalf("ungrouped job delivered with Group %q", got[id(5)].Message.Group)
	}
	ExpectNone(t, c, 300*time.Millisecond)

	// A retry now, a release and a postpone: the same job comes back,
	// not the next of its group.
	if err := c.Retry(ctx, got[id(1)], time.Time{}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := c.Release(ctx, got[id(3)]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got2 := fetchIDs(t, c, 10, 5*time.Second)
	for len(got2) < 2 {
		for k, v := range fetchIDs(t, c, 10, 5*time.Second) {
			got2[k] = v
		}
	}
	wantIDs(t, "after a retry and a release", got2, id(1), id(3))
	if a := got2[id(1)].Attempt(); a != 2 {
		t.Fatalf("retried job on attempt %d, want 2", a)
	}
	// A retry later waits as a timer; the group waits with it.
	if err := c.Retry(ctx, got2[id(1)], time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatalf("Retry later: %v", err)
	}
	Ack(t, c, got2[id(3)], got[id(5)])
	// b's next (6) joins; a's 2 must not while 1 waits for its retry.
	six := fetchIDs(t, c, 10, 5*time.Second)
	wantIDs(t, "after acking b's first", six, id(6))
	promoteDue(t, timersOf(t, e.d), q, 1)
	third := fetchIDs(t, c, 10, 5*time.Second)
	wantIDs(t, "after the retry was due", third, id(1))

	// A discard ends the job: the next of the group joins.
	if err := c.Discard(ctx, third[id(1)], "brokertest: discard"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	fourth := fetchIDs(t, c, 10, 5*time.Second)
	wantIDs(t, "after the discard", fourth, id(2))

	// A lease that runs out hands the job back in its place: the group
	// waits for it, and another consumer gets it, not a later job. (b's
	// 6 is acked first: on the stream driver a lease is an idle time that
	// the taker measures with its own timeout, so a consumer with a short
	// one would take 6 over from c.)
	Ack(t, c, fourth[id(2)], six[id(6)])
	short := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	held := fetchIDs(t, short, 10, 5*time.Second)
	wantIDs(t, "after acking a's second", held, id(4))
	taker := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: longLease})
	again := fetchIDs(t, taker, 10, 10*shortLease+5*time.Second)
	wantIDs(t, "after the lease ran out", again, id(4))
	if again[id(4)].Recoveries < 1 {
		t.Fatalf("recovered job has Recoveries %d, want >= 1", again[id(4)].Recoveries)
	}
	Ack(t, taker, again[id(4)])
	ExpectNone(t, c, 300*time.Millisecond)
	// Every job has ended: no group key is left.
	if n := keysUnder(t, e.prefix, "group"); n != 0 {
		t.Fatalf("%d group keys left after every job ended, want 0", n)
	}
}

// testGroupLimit proves a group's limit: with N = 2, two of its jobs are
// out at once, in order (an Inspector counts the others as Grouped); a
// later job that raises the limit lets those waiting in at once.
func testGroupLimit(t *testing.T, e *env) {
	const q = "group-limit"
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	id := func(i int) string { return NewMessage(q, i).ID }
	var ms []*broker.Message
	for i := 1; i <= 6; i++ {
		ms = append(ms, grouped(q, i, "g", 2))
	}
	Enqueue(t, e.d, ms...)
	// Two are in the queue; four wait in the group's line.
	if x, ok := e.d.(broker.Inspector); ok {
		if s := sizesOf(t, x, q); s.Ready != 2 || s.Grouped != 4 {
			t.Fatalf("sizes: ready %d, grouped %d; want 2 and 4", s.Ready, s.Grouped)
		}
	}
	first := fetchIDs(t, c, 10, 5*time.Second)
	wantIDs(t, "limit 2", first, id(1), id(2))
	ExpectNone(t, c, 300*time.Millisecond)
	Ack(t, c, first[id(2)])
	wantIDs(t, "after one ack", fetchIDs(t, c, 10, 5*time.Second), id(3))
	// Raising the limit to 4: 4 and 5 join at once, before 7.
	Enqueue(t, e.d, grouped(q, 7, "g", 4))
	got := fetchIDs(t, c, 10, 5*time.Second)
	wantIDs(t, "after the limit rose to 4", got, id(4), id(5))
}

// testGroupFairness proves that groups take turns: a group with many
// ready jobs holds one place in the queue, so each job of 10 one-job groups
// enqueued after it is delivered among the first 11.
func testGroupFairness(t *testing.T, e *env) {
	const q = "group-fair"
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	var ms []*broker.Message
	for i := range 200 {
		ms = append(ms, grouped(q, i, "big", 0))
	}
	Enqueue(t, e.d, ms...)
	var small []*broker.Message
	for i := range 10 {
		small = append(small, grouped(q, 1000+i, fmt.Sprintf("small-%d", i), 0))
	}
	Enqueue(t, e.d, small...)
	var order []string
	for len(order) < 22 {
		d := FetchOne(t, c, 5*time.Second)
		order = append(order, d.ID)
		Ack(t, c, d)
	}
	for _, m := range small {
		if i := slices.Index(order, m.ID); i < 0 || i > 10 {
			t.Fatalf("job of one-job group %s delivered at %d (order %v), want among the first 11", m.Group, i, order)
		}
	}
	// big's jobs came in enqueue order.
	var bigs []string
	for _, id := range order {
		if id < NewMessage(q, 1000).ID {
			bigs = append(bigs, id)
		}
	}
	if !slices.IsSorted(bigs) {
		t.Fatalf("big group's jobs out of order: %v", bigs)
	}
}

// testGroupDuplicateID proves that a grouped job's ID is refused while a
// grouped job of the queue holds it, and free again once it ended; and
// that a plain job with a grouped job's ID does not release its group when
// it ends.
func testGroupDuplicateID(t *testing.T, e *env) {
	const q = "group-dup"
	ctx := Context(t, 30*time.Second)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	Enqueue(t, e.d, grouped(q, 1, "g", 0), grouped(q, 2, "g", 0))
	for _, m := range []*broker.Message{grouped(q, 1, "g", 0), grouped(q, 2, "other", 0)} {
		if m.Group != "g" && split(e.d, q) {
			continue // another group may live in another partition, where the ID is free
		}
		err := e.d.Enqueue(ctx, []*broker.Message{m})
		var de *broker.DuplicateError
		if !errors.As(err, &de) || de.ID != m.ID || !errors.Is(err, broker.ErrDuplicate) {
			t.Fatalf("Enqueue of grouped %s again = %v, want a *broker.DuplicateError", m.ID, err)
		}
	}
	d := FetchOne(t, c, 5*time.Second)
	Ack(t, c, d)
	Enqueue(t, e.d, grouped(q, 1, "g", 0)) // 1 ended: its ID is free
	d2 := FetchOne(t, c, 5*time.Second)
	if d2.ID != NewMessage(q, 2).ID {
		t.Fatalf("delivered %s, want job 2 (1 came back behind it)", d2.ID)
	}

	// A plain job may share an ID with a grouped one; its end must not
	// release the grouped one's place. Here 2 is in flight and 1 waits.
	Enqueue(t, e.d, NewMessage(q, 2))
	plain := FetchOne(t, c, 5*time.Second)
	if plain.ID != d2.ID || plain.Message.Group != "" {
		t.Fatalf("delivered %s (group %q), want the plain job %s", plain.ID, plain.Message.Group, d2.ID)
	}
	if err := c.Discard(ctx, plain, "brokertest: the plain twin"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond) // grouped 2 still holds the group
	Ack(t, c, d2)
	if d := FetchOne(t, c, 5*time.Second); d.ID != NewMessage(q, 1).ID {
		t.Fatalf("after acking grouped 2, delivered %s, want job 1", d.ID)
	}
}

// testGroupCancel proves that cancelling a grouped job ends it wherever it
// is: waiting in its group's line (it never runs), ready, as a retry's
// timer, or in flight (its holder's settle removes it), and each lets the
// next job of the group in.
func testGroupCancel(t *testing.T, e *env) {
	const q = "group-cancel"
	ctx := Context(t, 60*time.Second)
	cn, ok := e.d.(broker.Canceler)
	if !ok || !e.caps.Cancel {
		t.Skipf("driver %T cannot cancel jobs", e.d)
	}
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	id := func(i int) string { return NewMessage(q, i).ID }
	var ms []*broker.Message
	for i := 1; i <= 6; i++ {
		ms = append(ms, grouped(q, i, "g", 0))
	}
	Enqueue(t, e.d, ms...)
	// 2 waits in the line: cancelled there, it never runs.
	cancelJob(t, cn, q, id(2), broker.JobReady)
	// 1 is ready: cancelled, 3 joins.
	cancelJob(t, cn, q, id(1), broker.JobReady)
	d := FetchOne(t, c, 5*time.Second)
	if d.ID != id(3) {
		t.Fatalf("after cancelling 1 and 2, delivered %s, want %s", d.ID, id(3))
	}
	// 3 is retried later, then cancelled as a timer: 4 joins.
	if err := c.Retry(ctx, d, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	cancelJob(t, cn, q, id(3), broker.JobDelayed)
	d = FetchOne(t, c, 5*time.Second)
	if d.ID != id(4) {
		t.Fatalf("after cancelling 3's retry, delivered %s, want %s", d.ID, id(4))
	}
	// 4 is in flight: cancelled, its holder's retry removes it; 5 joins.
	cancelJob(t, cn, q, id(4), broker.JobInFlight)
	if err := c.Retry(ctx, d, time.Time{}); err != nil {
		t.Fatalf("Retry of a cancelled delivery: %v", err)
	}
	d = FetchOne(t, c, 5*time.Second)
	if d.ID != id(5) {
		t.Fatalf("after cancelling 4 in flight, delivered %s, want %s", d.ID, id(5))
	}
	Ack(t, c, d)
	d = FetchOne(t, c, 5*time.Second)
	if d.ID != id(6) {
		t.Fatalf("delivered %s, want %s", d.ID, id(6))
	}
	Ack(t, c, d)
	ExpectNone(t, c, 300*time.Millisecond)
	if n := keysUnder(t, e.prefix, "group"); n != 0 {
		t.Fatalf("%d group keys left after every job ended, want 0", n)
	}
}

// testGroupPurge proves that purging the ready jobs and the timers of a
// queue ends the grouped jobs among them: the next of each group joins.
func testGroupPurge(t *testing.T, e *env) {
	const q = "group-purge"
	ctx := Context(t, 30*time.Second)
	x := inspectorOf(t, e)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: groupLease})
	id := func(i int) string { return NewMessage(q, i).ID }
	Enqueue(t, e.d, grouped(q, 1, "a", 0), grouped(q, 2, "a", 0), grouped(q, 3, "b", 0), grouped(q, 4, "b", 0))
	// b's first waits for a retry an hour away; a's is ready.
	ds := fetchIDs(t, c, 10, 5*time.Second)
	wantIDs(t, "first fetch", ds, id(1), id(3))
	if err := c.Retry(ctx, ds[id(3)], time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := c.Release(ctx, ds[id(1)]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n, err := x.PurgeReady(ctx, q, 1); err != nil || n != 1 {
		t.Fatalf("PurgeReady(1) = %d, %v; want 1", n, err)
	}
	if n, err := x.PurgeDelayed(ctx, q, 0); err != nil || n != 1 {
		t.Fatalf("PurgeDelayed = %d, %v; want 1", n, err)
	}
	got := fetchIDs(t, c, 10, 5*time.Second)
	for len(got) < 2 {
		for k, v := range fetchIDs(t, c, 10, 5*time.Second) {
			got[k] = v
		}
	}
	wantIDs(t, "after the purges", got, id(2), id(4))
}
