package brokertest

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The delete test runs on drivers that implement broker.QueueDeleter (an
// optional interface, beside broker.Inspector) and have the Inspect tests'
// capabilities; a driver without it is skipped, saying so.

// deleterOf returns e's driver as a broker.QueueDeleter, or skips t.
func deleterOf(t *testing.T, e *env) broker.QueueDeleter {
	t.Helper()
	x, ok := e.d.(broker.QueueDeleter)
	if !ok {
		t.Skipf("driver %T does not implement broker.QueueDeleter", e.d)
	}
	return x
}

// queueKeys lists the Redis keys of queue, sorted: those starting
// "<prefix>:{<queue>}:" or, for a Partitioned driver, the same of each of
// its partitions, found by a SCAN of the prefix on every master.
func queueKeys(t testing.TB, e *env, queue string) []string {
	t.Helper()
	bases := []string{keys.Queue(e.prefix, queue).Base()}
	for _, p := range partitions(e.d, queue) {
		bases = append(bases, keys.Queue(e.prefix, p).Base())
	}
	var out []string
	for _, k := range redistest.AllKeys(t, Client(t), e.prefix) {
		for _, base := range bases {
			if strings.HasPrefix(k, base) {
				out = append(out, k)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// settledKeys is queueKeys of a split queue without its partitions' wake
// signals, and the most signals it may have (queueKeys and 0 for a queue
// that is not split): an open consumer of a split queue sleeps on its empty
// partitions in the background and may give a wake-up back (setting a
// partition's signal) whenever a sleep returns, so their count changes
// under a test that holds such a consumer open.
func settledKeys(t testing.TB, e *env, queue string) (ks []string, signals int) {
	t.Helper()
	if !split(e.d, queue) {
		return queueKeys(t, e, queue), 0
	}
	signal := map[string]bool{}
	for _, p := range partitions(e.d, queue) {
		signal[keys.Queue(e.prefix, p).Part("wake")] = true
	}
	for _, k := range queueKeys(t, e, queue) {
		if !signal[k] {
			ks = append(ks, k)
		}
	}
	return ks, len(signal)
}

// checkDeleted checks a delete's result against want, its Keys against the
// settled keys before it: it may also have deleted up to signals wake
// signals.
func checkDeleted(t testing.TB, what string, res, want broker.QueueDeletion, before []string, signals int) {
	t.Helper()
	got := res
	want.Keys = int64(len(before))
	if n := res.Keys - want.Keys; n >= 0 && n <= int64(signals) {
		got.Keys = want.Keys
	}
	if got != want {
		t.Errorf("%s = %+v, want %+v, Keys plus up to %d wake signals (the driver had the keys %q)", what, res, want, signals, before)
	}
}

// testDeleteQueue proves DeleteQueue deletes a queue whole: with jobs in
// every state (ready, in flight, delayed as a timer and a cron fire,
// discarded), a unique key held, where the driver pauses, the queue
// paused, and where it keeps history, a sample of it, a delete without force refuses with an *InFlightError and
// changes nothing; a forced delete reports each state's jobs and the keys
// it deleted, leaves no key of the queue (a SCAN of its hash tag), takes it
// out of Queues, frees its unique key, and fences the jobs it took from
// flight (their settles fail with ErrLeaseLost and write nothing). A
// consumer left open goes on: a job enqueued after the delete reaches it
// and the queue is listed again. Another queue of the prefix, whose name
// the first one's matches as a glob pattern, keeps every key and job.
// Deleting an unknown queue is no error and deletes nothing.
func testDeleteQueue(t *testing.T, e *env) {
	// q's name is a glob pattern that other matches: a SCAN that did not
	// escape it would miss q's keys and find other's.
	const q, other = "del*[q]", "delq"
	x := deleterOf(t, e)
	in := inspectorOf(t, e)
	tm := timersOf(t, e.d)
	ctx := Context(t, time.Minute)

	// The other queue: a job in each state, and a consumer holding one.
	oc := Open(t, e.d, other, nil)
	discardMessages(t, e.d, oc, []*broker.Message{NewMessage(other, 1)}, func(int) string { return "other" })
	Enqueue(t, e.d, NewMessage(other, 2), NewMessage(other, 3), NewMessage(other, 4))
	FetchOne(t, oc, 5*time.Second)
	ol := NewMessage(other, 5)
	ol.RunAt = time.Now().Add(time.Hour)
	Enqueue(t, e.d, ol)
	otherSizes := broker.QueueSizes{Queue: other, Ready: 2, InFlight: 1, Delayed: 1, Discarded: 1, Failed: 1}
	// Closed (its delivery keeps its lease): a consumer of a split queue
	// sleeps on its empty partitions in the background and may give a
	// wake-up back whenever its sleep returns, which would change other's
	// keys (a wake signal) after they were read below.
	if err := oc.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkSizes(t, "the other queue", sizesOf(t, in, other), otherSizes)
	otherKeys := queueKeys(t, e, other)

	// q: one job discarded, one acked, two in flight, three ready (one
	// holding a unique key), a delayed job and a cron fire.
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: 10 * time.Minute})
	discardMessages(t, e.d, c, []*broker.Message{NewMessage(q, 1)}, func(int) string { return "gone" })
	Enqueue(t, e.d, NewMessage(q, 2))
	Ack(t, c, FetchOne(t, c, 5*time.Second))
	Enqueue(t, e.d, NewMessage(q, 10), NewMessage(q, 11))
	held := FetchN(t, c, 2, 2, 5*time.Second)
	unique := NewMessage(q, 3)
	unique.UniqueKey, unique.UniqueTTL = "u", time.Hour
	Enqueue(t, e.d, unique, NewMessage(q, 4), NewMessage(q, 5))
	late := NewMessage(q, 20)
	late.RunAt = time.Now().Add(time.Hour)
	Enqueue(t, e.d, late)
	fire := NewMessage(q, 21)
	fire.RunAt = time.UnixMilli(time.Now().Add(30 * time.Second).UnixMilli()) // no promoter runs
	fire.ID = "nightly@" + strconv.FormatInt(fire.RunAt.UnixMilli(), 10)
	if ok, err := tm.EnqueueFire(ctx, "nightly", fire, time.Hour); err != nil || !ok {
		t.Fatalf("EnqueueFire = %v, %v; want stored", ok, err)
	}
	if h, ok := e.d.(broker.Historian); ok && e.caps.History {
		if _, err := h.RecordSample(ctx, broker.QueueSizes{Queue: q, Ready: 3}, time.Hour, 2*time.Hour); err != nil {
			t.Fatalf("RecordSample: %v", err)
		}
	}
	p, pauses := e.d.(broker.Pauser)
	if pauses && e.caps.Pause {
		if err := p.PauseQueue(ctx, q); err != nil {
			t.Fatalf("PauseQueue: %v", err)
		}
	}
	full := broker.QueueSizes{Queue: q, Ready: 3, InFlight: 2, Delayed: 2, Discarded: 1, Processed: 1, Failed: 1}
	checkSizes(t, "before the deletes", sizesOf(t, in, q), full)
	before, signals := settledKeys(t, e, q)
	if len(before) == 0 {
		t.Fatalf("queue %q has no key under %s before its delete: the test cannot see what a delete leaves", q, e.prefix)
	}

	// Without force: refused, nothing deleted.
	_, err := x.DeleteQueue(ctx, q, false)
	var ife *broker.InFlightError
	if !errors.Is(err, broker.ErrJobsInFlight) || !errors.As(err, &ife) {
		t.Fatalf("DeleteQueue(force=false) with 2 jobs in flight: %v, want an *InFlightError", err)
	}
	if ife.Queue != q || ife.InFlight != 2 {
		t.Errorf("InFlightError = %+v, want queue %q and 2 in flight", *ife, q)
	}
	if got, _ := settledKeys(t, e, q); !slices.Equal(got, before) {
		t.Fatalf("a refused delete changed the queue's keys: %q, were %q", got, before)
	}
	if qs, err := in.Queues(ctx); err != nil || !slices.Contains(qs, q) {
		t.Fatalf("Queues after a refused delete = %q, %v; want %q listed", qs, err, q)
	}
	checkSizes(t, "after a refused delete", sizesOf(t, in, q), full)
	dup := NewMessage(q, 30)
	dup.UniqueKey, dup.UniqueTTL = "u", time.Hour
	if err := e.d.Enqueue(ctx, []*broker.Message{dup}); !errors.Is(err, broker.ErrDuplicate) {
		t.Fatalf("Enqueue holding unique key u after a refused delete: %v, want broker.ErrDuplicate", err)
	}

	// With force: everything goes.
	res, err := x.DeleteQueue(ctx, q, true)
	if err != nil {
		t.Fatalf("DeleteQueue(force=true): %v", err)
	}
	checkDeleted(t, "DeleteQueue(force=true)", res, broker.QueueDeletion{Queue: q, Ready: 3, InFlight: 2, Delayed: 2, Discarded: 1, Registered: true}, before, signals)
	if left := queueKeys(t, e, q); len(left) > 0 {
		t.Fatalf("keys of %q left after its delete: %q", q, left)
	}
	qs, err := in.Queues(ctx)
	if err != nil || slices.Contains(qs, q) || !slices.Contains(qs, other) {
		t.Fatalf("Queues after the delete = %q, %v; want %q gone and %q listed", qs, err, q, other)
	}
	checkSizes(t, "after the delete", sizesOf(t, in, q), broker.QueueSizes{Queue: q})
	if pauses && e.caps.Pause {
		if paused, err := p.QueuePaused(ctx, q); err != nil || paused {
			t.Errorf("QueuePaused after the delete = %v, %v; want false", paused, err)
		}
	}
	if ok, err := tm.Cancel(ctx, q, late.ID); err != nil || ok {
		t.Errorf("Cancel of a deleted timer = %v, %v; want false", ok, err)
	}
	if pr, err := tm.Promote(ctx, q, 100); err != nil || pr.Promoted != 0 || pr.Next >= 0 {
		t.Errorf("Promote after the delete = %+v, %v; want nothing pending", pr, err)
	}
	// The jobs taken from flight are fenced, and their settles store nothing.
	for _, d := range held[:1] {
		checkLeaseLost(t, "Ack after the delete", c.Ack(ctx, d), d, true)
	}
	checkLeaseLost(t, "Discard after the delete", c.Discard(ctx, held[1], "late"), held[1], false)
	checkLeaseLost(t, "Extend after the delete", c.Extend(ctx, time.Minute, held[1]), held[1], true)
	if left := queueKeys(t, e, q); len(left) > 0 {
		t.Fatalf("keys of %q after settles of the deleted jobs: %q", q, left)
	}

	// The other queue is untouched.
	if got := queueKeys(t, e, other); !slices.Equal(got, otherKeys) {
		t.Errorf("the delete of %q changed the keys of %q: %q, were %q", q, other, got, otherKeys)
	}
	checkSizes(t, "the other queue after the delete", sizesOf(t, in, other), otherSizes)

	// The consumer left open goes on: the unique key is free again, the job
	// holding it reaches the consumer, and the queue is listed again.
	again := NewMessage(q, 40)
	again.UniqueKey, again.UniqueTTL = "u", time.Hour
	Enqueue(t, e.d, again)
	if d := FetchOne(t, c, 5*time.Second); d.ID != again.ID {
		t.Fatalf("after the delete the open consumer fetched %s, want %s", d.ID, again.ID)
	} else {
		Ack(t, c, d)
	}
	if qs, err := in.Queues(ctx); err != nil || !slices.Contains(qs, q) {
		t.Errorf("Queues after an enqueue to the deleted queue = %q, %v; want it listed again", qs, err)
	}
	// Nothing in flight: a delete without force goes ahead.
	before, signals = settledKeys(t, e, q)
	res, err = x.DeleteQueue(ctx, q, false)
	if err != nil {
		t.Errorf("DeleteQueue(force=false) of a queue with nothing in flight: %v", err)
	}
	checkDeleted(t, "DeleteQueue(force=false) of a queue with nothing in flight", res, broker.QueueDeletion{Queue: q, Registered: true}, before, signals)
	if left := queueKeys(t, e, q); len(left) > 0 {
		t.Errorf("keys of %q left after its second delete: %q", q, left)
	}

	// A queue never used: nothing to delete, and no error.
	if res, err := x.DeleteQueue(ctx, "del-never", false); err != nil || res != (broker.QueueDeletion{Queue: "del-never"}) {
		t.Errorf("DeleteQueue of an unknown queue = %+v, %v; want nothing deleted", res, err)
	}
	for _, name := range HostileQueueNames {
		_, err := x.DeleteQueue(ctx, name, true)
		checkQueueErr(t, "DeleteQueue", name, err)
	}
	checkSizes(t, "the other queue at the end", sizesOf(t, in, other), otherSizes)
}
