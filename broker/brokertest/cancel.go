package brokertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

func cancels(c broker.Capabilities) bool { return c.Cancel && c.AtLeastOnce && c.Delay && c.Extend }

func cancelerOf(t *testing.T, d broker.Driver) broker.Canceler {
	t.Helper()
	c, ok := d.(broker.Canceler)
	if !ok {
		t.Fatalf("driver %T has Capabilities.Cancel but does not implement broker.Canceler", d)
	}
	return c
}

func cancelJob(t *testing.T, c broker.Canceler, queue, id string, want broker.JobState) {
	t.Helper()
	got, err := c.CancelJob(Context(t, 10*time.Second), queue, id)
	if err != nil {
		t.Fatalf("CancelJob(%q, %q): %v", queue, id, err)
	}
	if got != want {
		t.Fatalf("CancelJob(%q, %q) = %v, want %v", queue, id, got, want)
	}
}

// testCancelJob proves CancelJob in each state: a delayed job's timer and a
// ready job are removed (the others around them are delivered, the
// cancelled one never); an in-flight job is published to the watchers,
// reported by every Extend of its delivery (whose lease is still
// extended) and acked by its holder; one handed back (release, retry) by a
// holder that missed the cancel is removed; a job whose holder died is removed
// when its lease is reclaimed, not delivered again; a later job under the
// same ID is not touched by the earlier mark; nothing there reports 0.
func testCancelJob(t *testing.T, e *env) {
	const q = "cancel-job"
	cn := cancelerOf(t, e.d)
	ctx := Context(t, 60*time.Second)
	watch, err := cn.WatchCancels(ctx, q)
	if err != nil {
		t.Fatalf("WatchCancels: %v", err)
	}

	// Delayed.
	later := NewMessage(q, 1)
	later.RunAt = time.Now().Add(time.Hour)
	Enqueue(t, e.d, later)
	cancelJob(t, cn, q, later.ID, broker.JobDelayed)
	cancelJob(t, cn, q, later.ID, 0)

	// Ready: the middle one of three.
	r := []*broker.Message{NewMessage(q, 2), NewMessage(q, 3), NewMessage(q, 4)}
	Enqueue(t, e.d, r...)
	cancelJob(t, cn, q, r[1].ID, broker.JobReady)
	cancelJob(t, cn, q, r[1].ID, 0)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: longLease})
	got := FetchN(t, c, 2, 10, 5*time.Second)
	if ids := IDs(got); len(ids) != 2 || ids[0] != r[0].ID || ids[1] != r[2].ID {
		t.Fatalf("fetched %v after cancelling %s, want [%s %s]", ids, r[1].ID, r[0].ID, r[2].ID)
	}
	if err := c.Ack(ctx, got...); err != nil {
		t.Fatalf("Ack: %v", err)
	}

	// In flight, its holder alive; beside it a job whose ID ends in the
	// cancelled one's as a receipt would spell it, which is not touched.
	f := NewMessage(q, 5)
	near := NewMessage(q, 7)
	near.ID = fmt.Sprintf("x,%d:%s", len(f.ID), f.ID)
	Enqueue(t, e.d, near, f)
	ds := FetchN(t, c, 2, 2, 5*time.Second)
	d, dn := ds[1], ds[0]
	if split(e.d, q) && d.ID == near.ID {
		d, dn = dn, d // partitions keep no order between them
	}
	if d.ID != f.ID || dn.ID != near.ID {
		t.Fatalf("fetched %v, want [%s %s]", IDs(ds), near.ID, f.ID)
	}
	cancelJob(t, cn, q, f.ID, broker.JobInFlight)
	select {
	case n := <-watch:
		if n.Queue != q || n.ID != f.ID || n.Delivery != d.Receipt {
			t.Fatalf("WatchCancels received %+v, want {%s %s %s}", n, q, f.ID, d.Receipt)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchCancels received nothing within 5s of the cancel")
	}
	cancelJob(t, cn, q, f.ID, broker.JobInFlight) // still running: asked again
	before := d.LeaseDeadline
	err = c.Extend(ctx, longLease, d, dn)
	if !errors.Is(err, broker.ErrJobCanceled) {
		t.Fatalf("Extend of a cancelled delivery: %v, want ErrJobCanceled", err)
	}
	for _, de := range batchErrors(err) {
		if de.(*broker.DeliveryError).Delivery != d {
			t.Fatalf("Extend reported %v for a job that was not cancelled", de)
		}
	}
	if !d.LeaseDeadline.After(before) {
		t.Fatalf("Extend of a cancelled delivery left its lease at %v: the holder is alive, its lease must be kept", before)
	}
	if err := c.Ack(ctx, d, dn); err != nil {
		t.Fatalf("Ack of the cancelled delivery and its neighbour: %v", err)
	}
	cancelJob(t, cn, q, f.ID, 0)

	// In flight, handed back by a holder that missed the cancel (a release,
	// a retry): removed, not handed back.
	for i, back := range []func(*broker.Delivery) error{
		func(d *broker.Delivery) error { return c.Release(ctx, d) },
		func(d *broker.Delivery) error { return c.Retry(ctx, d, time.Now()) },
	} {
		m := NewMessage(q, 10+i)
		Enqueue(t, e.d, m)
		d := FetchOne(t, c, 5*time.Second)
		if d.ID != m.ID {
			t.Fatalf("fetched %s, want %s", d.ID, m.ID)
		}
		cancelJob(t, cn, q, m.ID, broker.JobInFlight)
		if err := back(d); err != nil {
			t.Fatalf("hand-back %d of a cancelled delivery: %v", i, err)
		}
		ExpectNone(t, c, 300*time.Millisecond)
		cancelJob(t, cn, q, m.ID, 0)
	}

	// In flight, its holder dead: the reclaim removes it.
	g := NewMessage(q, 6)
	Enqueue(t, e.d, g)
	dead := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	dg := FetchOne(t, dead, 5*time.Second)
	if dg.ID != g.ID {
		t.Fatalf("fetched %s, want %s", dg.ID, g.ID)
	}
	cancelJob(t, cn, q, g.ID, broker.JobInFlight)
	// A consumer with the short lease too: a driver that measures expiry by
	// the claimer's idle threshold takes the lease over as soon as one
	// whose deadline is the holder's does.
	taker := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	ExpectNone(t, taker, 4*shortLease+time.Second)
	cancelJob(t, cn, q, g.ID, 0)
	if err := dead.Ack(ctx, dg); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack by the holder whose cancelled lease was reclaimed: %v, want ErrLeaseLost", err)
	}

	// The same ID again: a new job, untouched by the old delivery's mark.
	again := NewMessage(q, 6)
	Enqueue(t, e.d, again)
	da := FetchOne(t, c, 5*time.Second)
	if da.ID != again.ID {
		t.Fatalf("fetched %s, want %s", da.ID, again.ID)
	}
	if err := c.Extend(ctx, longLease, da); err != nil {
		t.Fatalf("Extend of a new job under a cancelled job's ID: %v", err)
	}
	if err := c.Ack(ctx, da); err != nil {
		t.Fatalf("Ack: %v", err)
	}

	cancelJob(t, cn, q, "never-enqueued", 0)
	if _, err := cn.CancelJob(ctx, q, ""); !errors.Is(err, broker.ErrInvalidMessage) {
		t.Fatalf("CancelJob of an empty ID: %v, want ErrInvalidMessage", err)
	}
	if _, err := cn.CancelJob(ctx, "bad{queue}", "x"); !errors.Is(err, broker.ErrInvalidQueue) {
		t.Fatalf("CancelJob on a hostile queue name: %v, want ErrInvalidQueue", err)
	}
	if _, err := cn.WatchCancels(ctx, "bad queue"); !errors.Is(err, broker.ErrInvalidQueue) {
		t.Fatalf("WatchCancels on a hostile queue name: %v, want ErrInvalidQueue", err)
	}
	// Only in-flight cancels are published: f's (twice), those of the
	// hand-back loop and g's, never the delayed or the ready job's. On a
	// split queue each partition's notices come through a subscription of
	// their own, so they may arrive in any order.
	inFlight := map[string]bool{f.ID: true, g.ID: true, NewMessage(q, 10).ID: true, NewMessage(q, 11).ID: true}
	for {
		select {
		case n := <-watch:
			if !inFlight[n.ID] {
				t.Fatalf("WatchCancels received %+v: only in-flight cancels are published", n)
			}
			continue
		default:
		}
		break
	}
}

// testCancelJobWatchEnds: the watch's channel is closed when its context
// ends.
func testCancelJobWatchEnds(t *testing.T, e *env) {
	cn := cancelerOf(t, e.d)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cn.WatchCancels(ctx, "cancel-watch", "cancel-watch-2")
	if err != nil {
		t.Fatalf("WatchCancels: %v", err)
	}
	cancel()
	select {
	case _, open := <-w:
		if open {
			t.Fatal("WatchCancels delivered a notice nobody published")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchCancels' channel still open 5s after its context ended")
	}
}
