package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// The timer tests run on drivers with Capabilities.Delay, which must
// implement broker.Timers: a message enqueued with a RunAt after now waits
// as a timer under its ID until a promoter moves it to the ready structure.

// timerLead is how far ahead a test's timer is due when the test must act on
// it (cancel it, move it, enqueue a clash) while it is still pending: far
// more than one call takes under the race detector on a loaded machine.
const timerLead = time.Second

// timersOf returns d's timers; a driver with Delay must have them.
func timersOf(t testing.TB, d broker.Driver) broker.Timers {
	t.Helper()
	tm, ok := d.(broker.Timers)
	if !ok {
		t.Fatalf("driver %T has Capabilities.Delay but does not implement broker.Timers", d)
	}
	return tm
}

// dueMilli is the due time a driver keeps for t: unix milliseconds rounded
// up, so that no timer is due before its RunAt.
func dueMilli(t time.Time) time.Time {
	return time.UnixMilli((t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond))
}

// sendSlack bounds how long after its sender read its clock a driver reads
// the server's to turn a due time into a score, on a loaded machine.
const sendSlack = time.Second

// dueNear reports whether got is the due time a driver keeps for t: a
// driver is sent the wait until t and adds it to the server's clock, so
// with the clocks agreeing (one machine) got is never before t, rounded up
// to the millisecond, nor after it by more than the call took.
func dueNear(got, t time.Time) bool {
	want := dueMilli(t)
	return !got.Before(want) && got.Sub(want) <= sendSlack
}

// sleepCtx waits d or until ctx ends; it reports whether d passed. Tests use
// it only to wait for a due time a driver reported (Promotion.Next).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// promoteDue calls tm.Promote for q, with no promoter running, until it has
// moved want timers, waiting between calls until the next timer is due as
// the driver reports it. It fails t if more move, or if none is pending
// before want have moved.
func promoteDue(t testing.TB, tm broker.Timers, q string, want int) {
	t.Helper()
	ctx := Context(t, 30*time.Second)
	got := 0
	for {
		p, err := tm.Promote(ctx, q, 100)
		if err != nil {
			t.Fatalf("Promote(%q): %v", q, err)
		}
		got += p.Promoted
		if got > want {
			t.Fatalf("Promote(%q) moved %d timers, want %d", q, got, want)
		}
		if got == want {
			return
		}
		if p.Next < 0 {
			t.Fatalf("Promote(%q): no timer pending after %d of %d were promoted", q, got, want)
		}
		if !sleepCtx(ctx, p.Next) {
			t.Fatalf("Promote(%q): %d of %d timers promoted before the deadline", q, got, want)
		}
	}
}

// cancelTimer cancels the timer id of q and fails t unless Cancel says want.
func cancelTimer(t testing.TB, tm broker.Timers, q, id string, want bool) {
	t.Helper()
	ok, err := tm.Cancel(Context(t, 10*time.Second), q, id)
	if err != nil {
		t.Fatalf("Cancel(%q, %q): %v", q, id, err)
	}
	if ok != want {
		t.Fatalf("Cancel(%q, %q) = %v, want %v", q, id, ok, want)
	}
}

// reschedule moves the timer id of q to at and fails t unless Reschedule
// says want.
func reschedule(t testing.TB, tm broker.Timers, q, id string, at time.Time, want bool) {
	t.Helper()
	ok, err := tm.Reschedule(Context(t, 10*time.Second), q, id, at)
	if err != nil {
		t.Fatalf("Reschedule(%q, %q): %v", q, id, err)
	}
	if ok != want {
		t.Fatalf("Reschedule(%q, %q) = %v, want %v", q, id, ok, want)
	}
}

// pending returns every pending timer of q (up to 1000) and the count.
func pending(t testing.TB, tm broker.Timers, q string) ([]*broker.Message, int64) {
	t.Helper()
	ms, total, err := tm.PendingTimers(Context(t, 10*time.Second), q, 0, 1000)
	if err != nil {
		t.Fatalf("PendingTimers(%q): %v", q, err)
	}
	return ms, total
}

// fetchOnly fetches what becomes ready within wait and fails t unless it is
// exactly the delivery of want; it returns that delivery and when it came.
// Timers are promoted earliest first, so a timer due before want that was
// promoted comes in this fetch or before it.
func fetchOnly(t testing.TB, c broker.Consumer, want *broker.Message, wait time.Duration) (*broker.Delivery, time.Time) {
	t.Helper()
	ds := Fetch(t, c, 10, wait)
	got := time.Now()
	if len(ds) != 1 || ds[0].ID != want.ID || !bytes.Equal(ds[0].Payload, want.Payload) {
		t.Fatalf("fetched %v, want only %s (%q)", IDs(ds), want.ID, want.Payload)
	}
	return ds[0], got
}

// closeClean closes c and asserts that no key is left under the test's
// prefix: every timer was promoted or cancelled, every message acked.
func closeClean(t testing.TB, e *env, c broker.Consumer) {
	t.Helper()
	if c != nil {
		if err := c.Close(Context(t, 10*time.Second)); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	AssertNoKeys(t, e.prefix)
}

// testTimerCancel proves Cancel removes a pending timer for good: it reports
// true once, the timer is never delivered (a later timer, fetched after the
// cancelled one's due time with a promoter running, is the only delivery),
// and a second Cancel or the Cancel of an unknown ID reports false.
func testTimerCancel(t *testing.T, e *env) {
	const q = "timer-cancel"
	tm := timersOf(t, e.d)
	c := Open(t, e.d, q, nil)
	Promote(t, e.d, q)
	m := NewMessage(q, 1)
	m.RunAt = time.Now().Add(timerLead)
	marker := NewMessage(q, 2)
	marker.RunAt = m.RunAt.Add(200 * time.Millisecond)
	Enqueue(t, e.d, m, marker)

	cancelTimer(t, tm, q, m.ID, true)
	cancelTimer(t, tm, q, m.ID, false)
	cancelTimer(t, tm, q, "never-enqueued", false)

	d, got := fetchOnly(t, c, marker, time.Until(marker.RunAt)+5*time.Second)
	if got.Before(marker.RunAt.Add(-clockSlack)) {
		t.Fatalf("marker fetched %v before its RunAt", marker.RunAt.Sub(got))
	}
	if err := c.Ack(Context(t, 10*time.Second), d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	cancelTimer(t, tm, q, m.ID, false)
	closeClean(t, e, c)
}

// testTimerCancelAfterPromotion proves that of Cancel and promotion exactly
// one wins: once a timer is promoted, Cancel (and Reschedule) report false
// and the message is still delivered, once.
func testTimerCancelAfterPromotion(t *testing.T, e *env) {
	const q = "timer-cancel-late"
	tm := timersOf(t, e.d)
	c := Open(t, e.d, q, nil)
	m := NewMessage(q, 1)
	m.RunAt = time.Now().Add(timerLead / 4)
	Enqueue(t, e.d, m)
	promoteDue(t, tm, q, 1)

	cancelTimer(t, tm, q, m.ID, false)
	reschedule(t, tm, q, m.ID, time.Now().Add(time.Hour), false)
	d := FetchOne(t, c, 5*time.Second)
	if d.ID != m.ID {
		t.Fatalf("fetched %s, want %s", d.ID, m.ID)
	}
	checkSameMessage(t, &d.Message, m)
	if err := c.Ack(Context(t, 10*time.Second), d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	p, err := tm.Promote(Context(t, 10*time.Second), q, 10)
	if err != nil {
		t.Fatalf("Promote: %v", err)
	}
	if p.Promoted != 0 || p.Next >= 0 {
		t.Fatalf("Promote after the only timer was promoted and cancelled: %+v, want 0 promoted and Next < 0 (none pending)", p)
	}
	closeClean(t, e, c)
}

// testTimerReschedule proves Reschedule moves a pending timer: moved an hour
// ahead it is not delivered at its first due time (a later timer is fetched
// alone after it), PendingTimers shows the new due time, and moved to now it
// is delivered. Rescheduling a promoted or unknown timer reports false.
func testTimerReschedule(t *testing.T, e *env) {
	const q = "timer-reschedule"
	tm := timersOf(t, e.d)
	c := Open(t, e.d, q, nil)
	Promote(t, e.d, q)
	ctx := Context(t, 30*time.Second)
	m := NewMessage(q, 1)
	m.RunAt = time.Now().Add(timerLead)
	marker := NewMessage(q, 2)
	marker.RunAt = m.RunAt.Add(200 * time.Millisecond)
	Enqueue(t, e.d, m, marker)

	later := time.Now().Add(time.Hour)
	reschedule(t, tm, q, m.ID, later, true)
	d, got := fetchOnly(t, c, marker, time.Until(marker.RunAt)+5*time.Second)
	if got.Before(marker.RunAt.Add(-clockSlack)) {
		t.Fatalf("marker fetched %v before its RunAt", marker.RunAt.Sub(got))
	}
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ms, total := pending(t, tm, q)
	if total != 1 || len(ms) != 1 || ms[0].ID != m.ID {
		t.Fatalf("pending after the move: %d timers (total %d), want only %s", len(ms), total, m.ID)
	}
	if !dueNear(ms[0].RunAt, later) {
		t.Errorf("moved timer's RunAt %v, want %v", ms[0].RunAt, dueMilli(later))
	}

	reschedule(t, tm, q, m.ID, time.Now(), true)
	d = FetchOne(t, c, 5*time.Second)
	if d.ID != m.ID {
		t.Fatalf("fetched %s, want the rescheduled %s", d.ID, m.ID)
	}
	checkSameMessage(t, &d.Message, m)
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	reschedule(t, tm, q, m.ID, time.Now(), false)
	reschedule(t, tm, q, "never-enqueued", time.Now(), false)
	closeClean(t, e, c)
}

// testTimerDuplicateID proves a timer's ID is a business key: a delayed
// message whose ID a pending timer of the queue has (one enqueued before, or
// earlier in the same call) is refused with a *broker.DuplicateError naming
// it, the other messages of the call are stored, the pending timer is left
// as it was, and once it fired its ID can be used again.
func testTimerDuplicateID(t *testing.T, e *env) {
	const q = "timer-dup"
	c := Open(t, e.d, q, nil)
	Promote(t, e.d, q)
	ctx := Context(t, 30*time.Second)
	first := NewMessage(q, 1)
	first.ID = "order:1:timeout"
	first.RunAt = time.Now().Add(timerLead)
	Enqueue(t, e.d, first)

	dup := NewMessage(q, 2) // due sooner: an overwrite would come early
	dup.ID = first.ID
	dup.RunAt = time.Now().Add(timerLead / 2)
	now := NewMessage(q, 3)
	later := NewMessage(q, 4)
	later.RunAt = first.RunAt.Add(100 * time.Millisecond)
	twin := NewMessage(q, 5)
	twin.ID = later.ID
	twin.RunAt = later.RunAt
	err := e.d.Enqueue(ctx, []*broker.Message{dup, now, later, twin})
	if !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("Enqueue of a timer whose ID is pending: %v, want broker.ErrDuplicate", err)
	}
	var refused []string
	for _, err := range batchErrors(err) {
		var de *broker.DuplicateError
		if !errors.As(err, &de) {
			t.Fatalf("Enqueue error %v is not a *broker.DuplicateError", err)
		}
		if de.Queue != q {
			t.Errorf("DuplicateError names queue %q, want %q", de.Queue, q)
		}
		refused = append(refused, de.ID)
	}
	slices.Sort(refused)
	if want := []string{first.ID, later.ID}; !slices.Equal(refused, want) {
		t.Fatalf("refused %q, want %q (the pending timer's ID and the second of a pair in one call)", refused, want)
	}

	d := FetchOne(t, c, 5*time.Second)
	if d.ID != now.ID {
		t.Fatalf("fetched %s, want %s, stored at once beside the refused timers", d.ID, now.ID)
	}
	d1, got := fetchOnly(t, c, first, time.Until(first.RunAt)+5*time.Second)
	if got.Before(first.RunAt.Add(-clockSlack)) {
		t.Fatalf("%s fetched %v before its RunAt: the duplicate replaced it", first.ID, first.RunAt.Sub(got))
	}
	checkSameMessage(t, &d1.Message, first)

	// first fired (it is in flight): its ID is free for a new timer.
	again := NewMessage(q, 6)
	again.ID = first.ID
	again.RunAt = time.Now().Add(200 * time.Millisecond)
	Enqueue(t, e.d, again)
	rest := FetchN(t, c, 2, 2, time.Until(later.RunAt)+5*time.Second)
	payloads := []string{string(rest[0].Payload), string(rest[1].Payload)}
	slices.Sort(payloads)
	if want := []string{string(later.Payload), string(again.Payload)}; !slices.Equal(payloads, want) {
		t.Fatalf("fetched %v with payloads %q, want %s and %s with %q", IDs(rest), payloads, later.ID, again.ID, want)
	}
	if err := c.Ack(ctx, append(rest, d, d1)...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	closeClean(t, e, c)
}

// testTimerPendingPages proves PendingTimers pages through a queue's timers
// in due-time order with the count of all, each message intact with its due
// time as RunAt (to the millisecond, rounded up).
func testTimerPendingPages(t *testing.T, e *env) {
	const q, n, page = "timer-pages", 25, 10
	tm := timersOf(t, e.d)
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	msgs := make([]*broker.Message, n)
	byDue := make([]*broker.Message, n) // position in due order -> message
	for i := range msgs {
		m := NewMessage(q, i)
		m.Kind = fmt.Sprintf("kind-%d", i%3)
		m.Headers = map[string]string{"i": strconv.Itoa(i)}
		m.MaxAttempts = i
		// Due order is a permutation of enqueue (and ID) order; odd ones
		// carry a fraction of a millisecond, which rounds up.
		pos := i * 7 % n
		m.RunAt = base.Add(time.Duration(pos)*time.Second + time.Duration(i%2)*400*time.Microsecond)
		msgs[i], byDue[pos] = m, m
	}
	Enqueue(t, e.d, msgs...)

	ctx := Context(t, 30*time.Second)
	var got []*broker.Message
	for off := 0; off <= n; off += page {
		ms, total, err := tm.PendingTimers(ctx, q, off, page)
		if err != nil {
			t.Fatalf("PendingTimers(offset %d, limit %d): %v", off, page, err)
		}
		if total != n {
			t.Errorf("PendingTimers(offset %d) total %d, want %d", off, total, n)
		}
		if want := min(page, n-off); len(ms) != want {
			t.Fatalf("PendingTimers(offset %d, limit %d) returned %d, want %d", off, page, len(ms), want)
		}
		got = append(got, ms...)
	}
	for i, m := range got {
		want := byDue[i]
		if m.ID != want.ID {
			t.Fatalf("timer %d in due order is %s, want %s", i, m.ID, want.ID)
		}
		checkSameMessage(t, m, want)
		if !dueNear(m.RunAt, want.RunAt) {
			t.Errorf("%s: RunAt %v, want %v (enqueued %v)", m.ID, m.RunAt, dueMilli(want.RunAt), want.RunAt)
		}
		if m.Queue != q || m.Retries != 0 {
			t.Errorf("%s: Queue %q Retries %d, want %q 0", m.ID, m.Queue, m.Retries, q)
		}
	}
	for _, m := range msgs {
		cancelTimer(t, tm, q, m.ID, true)
	}
	if ms, total := pending(t, tm, q); len(ms) != 0 || total != 0 {
		t.Fatalf("after cancelling every timer PendingTimers returned %d, total %d; want none", len(ms), total)
	}
	closeClean(t, e, nil)
}

// testTimerPromoteOnce proves promotion is exactly once: four promoters
// racing over 2,000 timers due at the same moment move 2,000 in all, and
// each message is delivered once.
func testTimerPromoteOnce(t *testing.T, e *env) {
	const q, n, promoters, batch = "timer-promote-once", 2000, 4, 25
	tm := timersOf(t, e.d)
	c := Open(t, e.d, q, nil)
	due := time.Now().Add(2 * timerLead)
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
		msgs[i].RunAt = due
	}
	for i := 0; i < n; i += 500 {
		Enqueue(t, e.d, msgs[i:i+500]...)
	}
	if _, total := pending(t, tm, q); total != n {
		t.Fatalf("%d timers pending after enqueueing %d due in %v, want all", total, n, time.Until(due))
	}

	ctx := Context(t, 60*time.Second)
	moved := make([]int, promoters)
	var wg sync.WaitGroup
	for g := range promoters {
		wg.Go(func() {
			for {
				p, err := tm.Promote(ctx, q, batch)
				if err != nil {
					t.Errorf("promoter %d: Promote: %v", g, err)
					return
				}
				moved[g] += p.Promoted
				switch {
				case p.Promoted > 0:
				case p.Next < 0:
					return // nothing left
				case !sleepCtx(ctx, p.Next):
					t.Errorf("promoter %d: deadline with timers pending", g)
					return
				}
			}
		})
	}
	wg.Wait()
	sum := 0
	for _, m := range moved {
		sum += m
	}
	t.Logf("promoters moved %v", moved)
	if sum != n {
		t.Fatalf("%d promoters moved %d timers in all, want %d", promoters, sum, n)
	}

	seen := make(map[string]bool, n)
	for len(seen) < n {
		ds := Fetch(t, c, 100, 5*time.Second)
		for _, d := range ds {
			if seen[d.ID] {
				t.Fatalf("%s delivered twice", d.ID)
			}
			seen[d.ID] = true
		}
		if err := c.Ack(ctx, ds...); err != nil {
			t.Fatalf("Ack of %d: %v", len(ds), err)
		}
	}
	ExpectNone(t, c, 300*time.Millisecond)
	closeClean(t, e, c)
}

// testTimerNeverEarly proves a promoter never delivers a timer before its
// due time, judged by the local clock (the same machine as Redis in these
// tests; clockSlack absorbs the millisecond rounding).
func testTimerNeverEarly(t *testing.T, e *env) {
	const q, n = "timer-never-early", 20
	c := Open(t, e.d, q, nil)
	Promote(t, e.d, q)
	base := time.Now().Add(timerLead / 2)
	msgs := make([]*broker.Message, n)
	runAt := map[string]time.Time{}
	for i := range msgs {
		m := NewMessage(q, i)
		m.RunAt = base.Add(time.Duration(i)*20*time.Millisecond + 300*time.Microsecond)
		msgs[i] = m
		runAt[m.ID] = m.RunAt
	}
	Enqueue(t, e.d, msgs...)
	ctx := Context(t, 30*time.Second)
	late := time.Duration(0)
	for len(runAt) > 0 {
		ds := Fetch(t, c, n, time.Until(msgs[n-1].RunAt)+5*time.Second)
		got := time.Now()
		for _, d := range ds {
			at, ok := runAt[d.ID]
			if !ok {
				t.Fatalf("fetched %s, not one of the pending timers", d.ID)
			}
			delete(runAt, d.ID)
			if got.Before(at.Add(-clockSlack)) {
				t.Errorf("%s fetched %v before its RunAt", d.ID, at.Sub(got))
			}
			late = max(late, got.Sub(at))
		}
		if err := c.Ack(ctx, ds...); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	t.Logf("latest delivery %v after RunAt", late)
	ExpectNone(t, c, 300*time.Millisecond)
	closeClean(t, e, c)
}

// testTimerRetryClash proves a retry to a later time never overwrites a
// timer: a delivered message retried while a pending timer has its ID (the
// caller reused the ID once the message was running) is kept beside it, and
// both are delivered.
func testTimerRetryClash(t *testing.T, e *env) {
	const q = "timer-retry-clash"
	tm := timersOf(t, e.d)
	c := Open(t, e.d, q, nil)
	Promote(t, e.d, q)
	ctx := Context(t, 30*time.Second)
	m := NewMessage(q, 1)
	m.ID = "clash"
	Enqueue(t, e.d, m)
	d := FetchOne(t, c, 5*time.Second)
	if d.ID != m.ID {
		t.Fatalf("fetched %s, want %s", d.ID, m.ID)
	}
	timer := NewMessage(q, 2)
	timer.ID = m.ID
	timer.RunAt = time.Now().Add(timerLead)
	Enqueue(t, e.d, timer)
	if err := c.Retry(ctx, d, time.Now().Add(timerLead/2)); err != nil {
		t.Fatalf("Retry(at): %v", err)
	}
	ms, total := pending(t, tm, q)
	if total != 2 || len(ms) != 2 {
		t.Fatalf("%d timers pending (total %d) after a retry beside a timer of the same ID, want 2", len(ms), total)
	}

	ds := FetchN(t, c, 2, 2, time.Until(timer.RunAt)+5*time.Second)
	want := map[string]int{string(m.Payload): d.Retries + 1, string(timer.Payload): 0}
	for _, d := range ds {
		attempt, ok := want[string(d.Payload)]
		if d.ID != m.ID || !ok {
			t.Fatalf("fetched %s with %q, want %s with one of %q", d.ID, d.Payload, m.ID, []string{string(m.Payload), string(timer.Payload)})
		}
		delete(want, string(d.Payload))
		if d.Retries != attempt {
			t.Errorf("%s (%q): Retries %d, want %d", d.ID, d.Payload, d.Retries, attempt)
		}
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("Ack of both: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	closeClean(t, e, c)
}

// testTimerWake proves WatchTimers signals a promoter when a timer becomes
// the earliest (the first timer of a queue, one enqueued before all others,
// one rescheduled ahead of all others), and closes its channel when its
// context ends.
func testTimerWake(t *testing.T, e *env) {
	const q = "timer-wake"
	tm := timersOf(t, e.d)
	ctx := Context(t, 30*time.Second)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := tm.WatchTimers(wctx, q)
	if err != nil {
		t.Fatalf("WatchTimers: %v", err)
	}
	expectWake := func(what string) {
		t.Helper()
		timer := time.NewTimer(wakeBound)
		defer timer.Stop()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("WatchTimers channel closed before its context ended (%s)", what)
			}
		case <-timer.C:
			t.Fatalf("no wake-up within %v of %s", wakeBound, what)
		}
	}
	drain := func() {
		for {
			select {
			case <-ch:
			default:
				return
			}
		}
	}

	now := time.Now()
	first := NewMessage(q, 1)
	first.RunAt = now.Add(2 * time.Hour)
	Enqueue(t, e.d, first)
	expectWake("the first timer of the queue")

	behind := NewMessage(q, 2) // wakes nobody, but a spurious wake-up is allowed
	behind.RunAt = now.Add(3 * time.Hour)
	Enqueue(t, e.d, behind)
	drain()
	ahead := NewMessage(q, 3)
	ahead.RunAt = now.Add(time.Hour)
	Enqueue(t, e.d, ahead)
	expectWake("a timer due before all others")

	drain()
	reschedule(t, tm, q, behind.ID, now.Add(30*time.Minute), true)
	expectWake("a timer rescheduled before all others")

	for _, m := range []*broker.Message{first, behind, ahead} {
		cancelTimer(t, tm, q, m.ID, true)
	}
	stop()
	deadline := time.NewTimer(wakeBound)
	defer deadline.Stop()
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline.C:
			t.Fatalf("WatchTimers channel still open %v after its context ended", wakeBound)
		}
	}
	closeClean(t, e, nil)
}

// testTimerLate proves Promotion.Late: a call that promotes nothing reports
// 0; a call that promotes timers overdue by at least a known margin reports
// how late the earliest of them was, by the server's clock.
func testTimerLate(t *testing.T, e *env) {
	const q, overdue = "timer-late", 300 * time.Millisecond
	tm := timersOf(t, e.d)
	ctx := Context(t, 30*time.Second)
	first := NewMessage(q, 0)
	first.RunAt = time.Now().Add(timerLead / 2)
	second := NewMessage(q, 1)
	second.RunAt = first.RunAt.Add(100 * time.Millisecond)
	sent := time.Now()
	Enqueue(t, e.d, first, second)
	// A due time crosses to Redis as a wait from the caller's now, so the
	// server may score a timer up to the call's duration later than RunAt.
	took := time.Since(sent)
	p, err := tm.Promote(ctx, q, 10)
	if err != nil {
		t.Fatalf("Promote: %v", err)
	}
	if p.Promoted != 0 || p.Late != 0 {
		t.Fatalf("Promote before any is due = %+v, want nothing promoted and Late 0", p)
	}
	// Let both become overdue: the earliest by at least overdue+100ms.
	if !sleepCtx(ctx, time.Until(second.RunAt.Add(overdue))) {
		t.Fatal("deadline before the timers were due")
	}
	start := time.Now()
	p, err = tm.Promote(ctx, q, 10)
	if err != nil {
		t.Fatalf("Promote: %v", err)
	}
	if p.Promoted != 2 {
		t.Fatalf("Promote moved %d timers, want 2", p.Promoted)
	}
	lower := overdue + 100*time.Millisecond - took - clockSlack
	upper := time.Since(first.RunAt) + clockSlack
	if p.Late < lower || p.Late > upper {
		t.Fatalf("Late = %v, want the earliest timer's lateness, in [%v, %v] (enqueue took %v, promote %v)", p.Late, lower, upper, took, time.Since(start))
	}
}
