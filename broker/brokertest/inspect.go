package brokertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// The inspector tests run on drivers that implement broker.Inspector (an
// optional interface: a driver that stores nothing, like pubsub, does not)
// and have AtLeastOnce, Delay and Discard, so that a queue has all four
// states. A driver that does not implement it is skipped, saying so.

// inspectable is the capability gate of the inspector tests.
func inspectable(c broker.Capabilities) bool { return c.AtLeastOnce && c.Delay && c.Discard }

// inspectorOf returns e's driver as a broker.Inspector, or skips t.
func inspectorOf(t *testing.T, e *env) broker.Inspector {
	t.Helper()
	x, ok := e.d.(broker.Inspector)
	if !ok {
		t.Skipf("driver %T does not implement broker.Inspector", e.d)
	}
	return x
}

// sizesOf returns the sizes of one queue.
func sizesOf(t testing.TB, x broker.Inspector, q string) broker.QueueSizes {
	t.Helper()
	s, err := x.QueueSizes(Context(t, 30*time.Second), q)
	if err != nil {
		t.Fatalf("QueueSizes(%q): %v", q, err)
	}
	if len(s) != 1 || s[0].Queue != q {
		t.Fatalf("QueueSizes(%q) = %+v, want one entry for %q", q, s, q)
	}
	return s[0]
}

// checkSizes compares the per-state sizes and counters of s with want (its
// Discards aside).
func checkSizes(t testing.TB, when string, s broker.QueueSizes, want broker.QueueSizes) {
	t.Helper()
	got := s
	got.Discards = broker.DiscardStats{}
	if got != want {
		t.Errorf("%s: QueueSizes = ready %d, in flight %d, delayed %d, discarded %d, processed %d, failed %d; "+
			"want %d, %d, %d, %d, %d, %d", when,
			s.Ready, s.InFlight, s.Delayed, s.Discarded, s.Processed, s.Failed,
			want.Ready, want.InFlight, want.Delayed, want.Discarded, want.Processed, want.Failed)
	}
	if s.Discards.Count != s.Discarded {
		t.Errorf("%s: Discards.Count %d, Discarded %d: want them equal", when, s.Discards.Count, s.Discarded)
	}
}

// listJobs pages through queue's jobs in state, limit at a time, and
// returns them in order. It fails t if a page is longer than asked or a
// total differs from the number of jobs seen.
func listJobs(t testing.TB, x broker.Inspector, q string, state broker.JobState, limit int) []*broker.JobInfo {
	t.Helper()
	ctx := Context(t, time.Minute)
	var out []*broker.JobInfo
	for {
		page, total, err := x.ListJobs(ctx, q, state, len(out), limit)
		if err != nil {
			t.Fatalf("ListJobs(%q, %v, %d, %d): %v", q, state, len(out), limit, err)
		}
		if len(page) > limit {
			t.Fatalf("ListJobs(%q, %v, %d, %d) returned %d jobs", q, state, len(out), limit, len(page))
		}
		for _, j := range page {
			if j.State != state || j.Queue != q {
				t.Fatalf("ListJobs(%q, %v) returned %s in state %v of queue %q", q, state, j.ID, j.State, j.Queue)
			}
		}
		out = append(out, page...)
		if len(page) == 0 {
			if int64(len(out)) != total {
				t.Fatalf("ListJobs(%q, %v) pages hold %d jobs, total says %d", q, state, len(out), total)
			}
			return out
		}
	}
}

// jobIDs returns the IDs of js in order.
func jobIDs(js []*broker.JobInfo) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// testInspectQueues proves Queues lists, sorted and once each, every queue
// the driver enqueued to (one message or a batch over several queues) or
// opened a consumer on, and no queue it refused.
func testInspectQueues(t *testing.T, e *env) {
	x := inspectorOf(t, e)
	ctx := Context(t, 30*time.Second)
	if qs, err := x.Queues(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("Queues before any use = %q, %v; want none", qs, err)
	}
	Open(t, e.d, "iq-opened", nil)
	Enqueue(t, e.d, NewMessage("iq-one", 1))
	Enqueue(t, e.d, NewMessage("iq-b", 1), NewMessage("iq-a", 1), NewMessage("iq-b", 2))
	late := NewMessage("iq-delayed", 1)
	late.RunAt = time.Now().Add(time.Hour)
	Enqueue(t, e.d, late)
	Enqueue(t, e.d, NewMessage("iq-one", 2)) // known already
	for _, name := range HostileQueueNames {
		_ = e.d.Enqueue(ctx, []*broker.Message{{ID: "x", Kind: "k", Queue: name}})
		if c, err := e.d.Open(ctx, name, nil); err == nil {
			_ = c.Close(ctx)
		}
	}
	want := []string{"iq-a", "iq-b", "iq-delayed", "iq-one", "iq-opened"}
	qs, err := x.Queues(ctx)
	if err != nil || !slices.Equal(qs, want) {
		t.Fatalf("Queues = %q, %v; want %q", qs, err, want)
	}
}

// testInspectSizes proves QueueSizes counts each state and the throughput
// counters: Processed counts acked messages (a batch by its size, a stale
// ack not at all), Failed counts retries and discards but not postpones or
// releases. Several queues are read in one call, in the order asked, an
// unknown queue as zeros.
func testInspectSizes(t *testing.T, e *env) {
	const q = "isizes"
	x := inspectorOf(t, e)
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, nil)
	checkSizes(t, "empty queue", sizesOf(t, x, q), broker.QueueSizes{Queue: q})

	msgs := make([]*broker.Message, 10)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
	}
	for i := range 2 {
		m := NewMessage(q, 100+i)
		m.RunAt = time.Now().Add(time.Hour)
		msgs = append(msgs, m)
	}
	Enqueue(t, e.d, msgs...)
	checkSizes(t, "after enqueue", sizesOf(t, x, q), broker.QueueSizes{Queue: q, Ready: 10, Delayed: 2})

	ds := FetchN(t, c, 6, 6, 5*time.Second)
	checkSizes(t, "after fetching 6", sizesOf(t, x, q), broker.QueueSizes{Queue: q, Ready: 4, InFlight: 6, Delayed: 2})
	if err := c.Ack(ctx, ds[0], ds[1]); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := c.Ack(ctx, ds[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("second Ack: %v, want broker.ErrLeaseLost", err)
	}
	// The zero time: due at once, whatever the clocks say.
	if err := c.Retry(ctx, ds[2], time.Time{}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := c.Postpone(ctx, ds[3], time.Time{}); err != nil {
		t.Fatalf("Postpone: %v", err)
	}
	if err := c.Release(ctx, ds[4]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := c.Discard(ctx, ds[5], "bad"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	checkSizes(t, "after settling 6", sizesOf(t, x, q),
		broker.QueueSizes{Queue: q, Ready: 7, Delayed: 2, Discarded: 1, Processed: 2, Failed: 2})

	ds = FetchN(t, c, 2, 2, 5*time.Second)
	if err := c.Retry(ctx, ds[0], time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Retry(later): %v", err)
	}
	s := sizesOf(t, x, q)
	checkSizes(t, "after a retry for later", s,
		broker.QueueSizes{Queue: q, Ready: 5, InFlight: 1, Delayed: 3, Discarded: 1, Processed: 2, Failed: 3})
	if s.Discards.MaxCount < 1 || s.Discards.Oldest.IsZero() {
		t.Errorf("Discards = %+v, want the retention in force and the oldest record's time", s.Discards)
	}

	all, err := x.QueueSizes(ctx, "isizes-unknown", q)
	if err != nil || len(all) != 2 {
		t.Fatalf("QueueSizes of two queues = %+v, %v", all, err)
	}
	checkSizes(t, "unknown queue", all[0], broker.QueueSizes{Queue: "isizes-unknown"})
	if all[1].Queue != q || all[1].Ready != 5 {
		t.Errorf("QueueSizes of two queues: second = %+v, want %s with 5 ready", all[1], q)
	}
	if out, err := x.QueueSizes(ctx); err != nil || len(out) != 0 {
		t.Errorf("QueueSizes of no queue = %+v, %v; want none", out, err)
	}
}

// testInspectListJobs proves ListJobs pages through each state in its
// order with the job as stored: ready in the order Fetch hands the jobs
// out, in flight the fetched jobs with their lease, delayed earliest due
// first with RunAt, discarded newest first with the reason.
func testInspectListJobs(t *testing.T, e *env) {
	const q = "ilist"
	x := inspectorOf(t, e)
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, nil)

	var msgs []*broker.Message
	for i := range 25 {
		m := NewMessage(q, i)
		m.Headers = map[string]string{"n": fmt.Sprint(i)}
		m.MaxAttempts = i
		msgs = append(msgs, m)
	}
	Enqueue(t, e.d, msgs...)
	fetched := FetchN(t, c, 5, 5, 5*time.Second)
	// The next-to-run job goes back to the front of the queue (list) or its
	// end (stream): either way ListJobs must show ready jobs in the order
	// Fetch hands them out.
	if err := c.Release(ctx, fetched[4]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	fetched = fetched[:4]

	ready := listJobs(t, x, q, broker.JobReady, 7)
	if len(ready) != 21 {
		t.Fatalf("ListJobs(ready) = %d jobs, want 21", len(ready))
	}
	byID := map[string]*broker.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	for _, j := range ready {
		if want := byID[j.ID]; want == nil {
			t.Fatalf("ListJobs(ready) returned unknown job %q", j.ID)
		} else {
			checkSameMessage(t, &j.Message, want)
		}
	}
	page, total, err := x.ListJobs(ctx, q, broker.JobReady, 19, 5)
	if err != nil || total != 21 || !slices.Equal(jobIDs(page), jobIDs(ready[19:])) {
		t.Fatalf("ListJobs(ready, 19, 5) = %q, %d, %v; want %q, 21", jobIDs(page), total, err, jobIDs(ready[19:]))
	}
	if page, total, err := x.ListJobs(ctx, q, broker.JobReady, 50, 5); err != nil || total != 21 || len(page) != 0 {
		t.Fatalf("ListJobs(ready) past the end = %d jobs, total %d, %v; want none, 21", len(page), total, err)
	}

	inflight := listJobs(t, x, q, broker.JobInFlight, 3)
	if got, want := sortedIDs(jobIDs(inflight)), sortedIDs(IDs(fetched)); !slices.Equal(got, want) {
		t.Fatalf("ListJobs(in flight) = %q, want %q", got, want)
	}
	for _, j := range inflight {
		checkSameMessage(t, &j.Message, byID[j.ID])
		if j.LeaseDeadline.IsZero() && (j.LeasedAt.IsZero() || j.Consumer == "") {
			t.Errorf("in-flight %s: no LeaseDeadline, nor LeasedAt and Consumer", j.ID)
		}
		if !j.LeaseDeadline.IsZero() && !j.LeaseDeadline.After(time.Now()) {
			t.Errorf("in-flight %s: LeaseDeadline %v has passed", j.ID, j.LeaseDeadline)
		}
		if !j.LeasedAt.IsZero() && (j.LeasedAt.After(time.Now().Add(time.Second)) || j.LeasedAt.Before(time.Now().Add(-time.Minute))) {
			t.Errorf("in-flight %s: LeasedAt %v is not about now", j.ID, j.LeasedAt)
		}
	}

	// Fetching the rest hands them out in the order ListJobs showed.
	rest := FetchN(t, c, 21, 21, 5*time.Second)
	if got, want := IDs(rest), jobIDs(ready); !inOrder(e, q, got, want) {
		t.Fatalf("Fetch order %q, ListJobs(ready) order %q", got, want)
	}
	if err := c.Ack(ctx, append(rest, fetched...)...); err != nil {
		t.Fatalf("Ack: %v", err)
	}

	// Delayed: enqueued out of order, listed earliest first.
	base := time.Now().Add(time.Hour)
	var late []*broker.Message
	for _, i := range []int{3, 0, 4, 1, 2} {
		m := NewMessage(q, 200+i)
		m.RunAt = base.Add(time.Duration(i) * time.Minute)
		late = append(late, m)
	}
	Enqueue(t, e.d, late...)
	delayed := listJobs(t, x, q, broker.JobDelayed, 2)
	if got, want := jobIDs(delayed), []string{q + "-000200", q + "-000201", q + "-000202", q + "-000203", q + "-000204"}; !slices.Equal(got, want) {
		t.Fatalf("ListJobs(delayed) = %q, want earliest first %q", got, want)
	}
	for i, j := range delayed {
		if want := dueMilli(base.Add(time.Duration(i) * time.Minute)); !dueNear(j.RunAt, want) {
			t.Errorf("delayed %s: RunAt %v, want %v", j.ID, j.RunAt, want)
		}
	}

	// Discarded: newest first, with the reason.
	dmsgs := []*broker.Message{NewMessage(q, 300), NewMessage(q, 301), NewMessage(q, 302)}
	_, after := discardMessages(t, e.d, c, dmsgs, func(i int) string { return fmt.Sprintf("reason %d", i) })
	discarded := listJobs(t, x, q, broker.JobDiscarded, 2)
	if got, want := jobIDs(discarded), messageIDs(dmsgs, true); !inOrder(e, q, got, want) {
		t.Fatalf("ListJobs(discarded) = %q, want newest first %q", got, want)
	}
	// (The order is checked above; a split queue may order records of one
	// millisecond either way, so the newest is found by its ID.)
	j := discarded[slices.IndexFunc(discarded, func(j *broker.JobInfo) bool { return j.ID == dmsgs[2].ID })]
	if j.Reason != "reason 2" || j.DiscardedAt.IsZero() || j.DiscardedAt.After(after.Add(time.Second)) {
		t.Errorf("discarded %s: Reason %q, DiscardedAt %v; want \"reason 2\" and a time before %v", j.ID, j.Reason, j.DiscardedAt, after)
	}

	// Bad requests.
	for _, bad := range []struct {
		state         broker.JobState
		offset, limit int
	}{
		{broker.JobReady, -1, 10},
		{broker.JobReady, 0, 0},
		{broker.JobReady, 0, broker.MaxInspectPage + 1},
		{broker.JobDiscarded, 0, broker.MaxInspectPage + 1},
		{broker.JobState(0), 0, 10},
		{broker.JobState(9), 0, 10},
	} {
		if _, _, err := x.ListJobs(ctx, q, bad.state, bad.offset, bad.limit); err == nil {
			t.Errorf("ListJobs(%v, offset %d, limit %d): nil error", bad.state, bad.offset, bad.limit)
		}
	}
	if _, _, err := x.ListJobs(ctx, q, broker.JobReady, 0, broker.MaxInspectPage); err != nil {
		t.Errorf("ListJobs with the largest limit: %v", err)
	}
}

// sortedIDs returns a sorted copy of ids.
func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// testInspectFindJob proves FindJob finds a job by ID in the state it is in
// (and only there), also past the first thousand entries of a state, and
// returns nil for an unknown ID.
func testInspectFindJob(t *testing.T, e *env) {
	const q = "ifind"
	x := inspectorOf(t, e)
	ctx := Context(t, 2*time.Minute)
	c := Open(t, e.d, q, nil)

	gone := NewMessage(q, 9001)
	discardMessages(t, e.d, c, []*broker.Message{gone}, func(int) string { return "gone" })
	late := NewMessage(q, 9000)
	late.RunAt = time.Now().Add(time.Hour)
	late.Payload = []byte("later")
	Enqueue(t, e.d, late)
	// 1,200 in flight, then 2,500 ready: both more than one script call's
	// stretch of 1,000.
	const nFlight, nReady = 1200, 2500
	var msgs []*broker.Message
	for i := range nFlight + nReady {
		msgs = append(msgs, NewMessage(q, i))
	}
	msgs[0].Headers = map[string]string{"first": "yes"}
	Enqueue(t, e.d, msgs...)
	inflight := FetchN(t, c, nFlight, 1000, 10*time.Second)

	find := func(state broker.JobState, id string) *broker.JobInfo {
		t.Helper()
		j, err := x.FindJob(ctx, q, state, id)
		if err != nil {
			t.Fatalf("FindJob(%v, %s): %v", state, id, err)
		}
		if j != nil && (j.ID != id || j.State != state || j.Queue != q) {
			t.Fatalf("FindJob(%v, %s) = %s in state %v of %q", state, id, j.ID, j.State, j.Queue)
		}
		return j
	}
	for _, d := range []*broker.Delivery{inflight[0], inflight[nFlight-1]} {
		j := find(broker.JobInFlight, d.ID)
		if j == nil {
			t.Fatalf("FindJob(in flight, %s) = nil", d.ID)
		}
		checkSameMessage(t, &j.Message, &d.Message)
		if j.LeaseDeadline.IsZero() && j.LeasedAt.IsZero() {
			t.Errorf("FindJob(in flight, %s): no LeaseDeadline nor LeasedAt", d.ID)
		}
		if find(broker.JobReady, d.ID) != nil {
			t.Errorf("FindJob(ready, %s) found an in-flight job", d.ID)
		}
	}
	// The ready ones: those not fetched (the last 2,500 but for a split
	// queue, whose partitions hand out their own heads).
	fetched := make(map[string]bool, nFlight)
	for _, d := range inflight {
		fetched[d.ID] = true
	}
	var ready []*broker.Message
	for _, m := range msgs {
		if !fetched[m.ID] {
			ready = append(ready, m)
		}
	}
	for _, m := range []*broker.Message{ready[0], ready[1500], ready[len(ready)-1]} {
		j := find(broker.JobReady, m.ID)
		if j == nil {
			t.Fatalf("FindJob(ready, %s) = nil", m.ID)
		}
		checkSameMessage(t, &j.Message, m)
		if find(broker.JobInFlight, m.ID) != nil {
			t.Errorf("FindJob(in flight, %s) found a ready job", m.ID)
		}
	}
	if j := find(broker.JobDelayed, late.ID); j == nil || string(j.Payload) != "later" || !dueNear(j.RunAt, late.RunAt) {
		t.Errorf("FindJob(delayed, %s) = %+v, want it with RunAt %v", late.ID, j, dueMilli(late.RunAt))
	}
	if j := find(broker.JobDiscarded, gone.ID); j == nil || j.Reason != "gone" {
		t.Errorf("FindJob(discarded, %s) = %+v, want its record", gone.ID, j)
	}
	for _, s := range []broker.JobState{broker.JobReady, broker.JobInFlight, broker.JobDelayed, broker.JobDiscarded} {
		if j := find(s, "nosuch"); j != nil {
			t.Errorf("FindJob(%v, nosuch) = %s", s, j.ID)
		}
		if s != broker.JobDelayed && find(s, late.ID) != nil {
			t.Errorf("FindJob(%v, %s) found a delayed job", s, late.ID)
		}
	}
	for _, id := range []string{"", "a{b", "a b"} {
		if _, err := x.FindJob(ctx, q, broker.JobReady, id); !errors.Is(err, broker.ErrInvalidMessage) {
			t.Errorf("FindJob(ready, %q): %v, want broker.ErrInvalidMessage", id, err)
		}
	}
	if _, err := x.FindJob(ctx, q, broker.JobState(0), "x"); err == nil {
		t.Error("FindJob with no state: nil error")
	}
}

// testInspectPurge proves PurgeReady deletes ready jobs next-to-run first
// (max of them, or all with 0) and leaves in-flight jobs settleable, and
// PurgeDelayed deletes timers earliest first, never to be promoted.
func testInspectPurge(t *testing.T, e *env) {
	const q = "ipurge"
	x := inspectorOf(t, e)
	tm := timersOf(t, e.d)
	ctx := Context(t, 2*time.Minute)
	c := Open(t, e.d, q, nil)

	var msgs []*broker.Message
	for i := range 2510 {
		msgs = append(msgs, NewMessage(q, i))
	}
	Enqueue(t, e.d, msgs...)
	held := FetchN(t, c, 5, 5, 5*time.Second)
	ready := listJobs(t, x, q, broker.JobReady, 1000)
	if n, err := x.PurgeReady(ctx, q, 3); err != nil || n != 3 {
		t.Fatalf("PurgeReady(3) = %d, %v; want 3", n, err)
	}
	page, total, err := x.ListJobs(ctx, q, broker.JobReady, 0, 2)
	if err != nil || total != 2502 || (!split(e.d, q) && !slices.Equal(jobIDs(page), jobIDs(ready[3:5]))) {
		t.Fatalf("after PurgeReady(3): ready %q of %d (%v), want %q of 2502: the next-to-run go first", jobIDs(page), total, err, jobIDs(ready[3:5]))
	}
	if n, err := x.PurgeReady(ctx, q, 0); err != nil || n != 2502 {
		t.Fatalf("PurgeReady(0) = %d, %v; want all 2502", n, err)
	}
	if n, err := x.PurgeReady(ctx, q, 0); err != nil || n != 0 {
		t.Fatalf("PurgeReady(0) of an empty queue = %d, %v; want 0", n, err)
	}
	checkSizes(t, "after purging ready", sizesOf(t, x, q), broker.QueueSizes{Queue: q, InFlight: 5})
	if err := c.Ack(ctx, held...); err != nil {
		t.Fatalf("Ack of the in-flight jobs after the purge: %v", err)
	}

	base := time.Now().Add(time.Hour)
	var late []*broker.Message
	for i := range 6 {
		m := NewMessage(q, 100+i)
		m.RunAt = base.Add(time.Duration(5-i) * time.Minute) // the last is due first
		late = append(late, m)
	}
	Enqueue(t, e.d, late...)
	if n, err := x.PurgeDelayed(ctx, q, 2); err != nil || n != 2 {
		t.Fatalf("PurgeDelayed(2) = %d, %v; want 2", n, err)
	}
	left := listJobs(t, x, q, broker.JobDelayed, 10)
	if got, want := jobIDs(left), []string{late[3].ID, late[2].ID, late[1].ID, late[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("after PurgeDelayed(2): %q, want %q (the earliest go first)", got, want)
	}
	for _, m := range late[4:] {
		if ok, err := tm.Cancel(ctx, q, m.ID); err != nil || ok {
			t.Errorf("Cancel(%s) after its purge = %v, %v; want false", m.ID, ok, err)
		}
	}
	if n, err := x.PurgeDelayed(ctx, q, 0); err != nil || n != 4 {
		t.Fatalf("PurgeDelayed(0) = %d, %v; want 4", n, err)
	}
	if p, err := tm.Promote(ctx, q, 100); err != nil || p.Promoted != 0 || p.Next >= 0 {
		t.Fatalf("Promote after purging every timer = %+v, %v; want nothing pending", p, err)
	}
	checkSizes(t, "after purging everything", sizesOf(t, x, q), broker.QueueSizes{Queue: q, Processed: 5})
	for _, f := range []func() (int, error){
		func() (int, error) { return x.PurgeReady(ctx, q, -1) },
		func() (int, error) { return x.PurgeDelayed(ctx, q, -1) },
	} {
		if _, err := f(); err == nil {
			t.Error("a purge with a negative max: nil error")
		}
	}
}

// testInspectHostileQueueNames proves every Inspector method refuses a
// hostile queue name with a *broker.QueueNameError.
func testInspectHostileQueueNames(t *testing.T, e *env) {
	x := inspectorOf(t, e)
	ctx := Context(t, 30*time.Second)
	for _, name := range HostileQueueNames {
		_, err := x.QueueSizes(ctx, "fine", name)
		checkQueueErr(t, "QueueSizes", name, err)
		_, _, err = x.ListJobs(ctx, name, broker.JobReady, 0, 10)
		checkQueueErr(t, "ListJobs", name, err)
		_, err = x.FindJob(ctx, name, broker.JobReady, "x")
		checkQueueErr(t, "FindJob", name, err)
		_, err = x.PurgeReady(ctx, name, 0)
		checkQueueErr(t, "PurgeReady", name, err)
		_, err = x.PurgeDelayed(ctx, name, 0)
		checkQueueErr(t, "PurgeDelayed", name, err)
	}
	if qs, err := x.Queues(ctx); err != nil || len(qs) != 0 {
		t.Errorf("Queues after refused calls = %q, %v; want none", qs, err)
	}
	AssertNoKeys(t, e.prefix)
}
