package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
)

// TestCancelJobAcrossStretches: CancelJob finds a ready and an in-flight
// job past the first stretch of its state (500 entries a script call),
// deletes the ready entry and marks the in-flight delivery by its entry
// ID; an Extend of a batch reports the cancelled delivery alone, and
// extends every lease of the batch.
func TestCancelJobAcrossStretches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	msgs := make([]*broker.Message, 1700)
	for i := range msgs {
		msgs[i] = msg("q", fmt.Sprintf("m%04d", i))
	}
	e.enqueue(msgs...)
	c := e.open("q", time.Hour)
	held := e.fetch(c, 1000)
	if len(held) != 1000 || held[750].ID != msgs[750].ID {
		t.Fatalf("fetched %d, the 751st %s; want 1000, %s", len(held), held[750].ID, msgs[750].ID)
	}

	if st, err := e.d.CancelJob(ctx, "q", msgs[1650].ID); err != nil || st != broker.JobReady {
		t.Fatalf("CancelJob(ready %s) = %v, %v; want JobReady", msgs[1650].ID, st, err)
	}
	if n, err := e.rdb.XLen(ctx, e.key("q", "stream")).Result(); err != nil || n != 1699 {
		t.Fatalf("stream length after cancelling a ready job = %d, %v; want 1699", n, err)
	}
	if j, err := e.d.FindJob(ctx, "q", broker.JobReady, msgs[1650].ID); err != nil || j != nil {
		t.Fatalf("FindJob(ready %s) after its cancel = %+v, %v; want nothing", msgs[1650].ID, j, err)
	}

	if st, err := e.d.CancelJob(ctx, "q", msgs[750].ID); err != nil || st != broker.JobInFlight {
		t.Fatalf("CancelJob(in flight %s) = %v, %v; want JobInFlight", msgs[750].ID, st, err)
	}
	marks, err := e.rdb.ZRange(ctx, e.key("q", "canceled"), 0, -1).Result()
	if err != nil || len(marks) != 1 || marks[0] != held[750].Receipt {
		t.Fatalf("marks = %q, %v; want the entry ID of the cancelled delivery, %s", marks, err, held[750].Receipt)
	}

	batch := held[749:752]
	before := make([]time.Time, len(batch))
	for i, d := range batch {
		before[i] = d.LeaseDeadline
	}
	err = c.Extend(ctx, 2*time.Hour, batch...)
	var merr *multierror.Error
	if !errors.As(err, &merr) || len(merr.Errors) != 1 {
		t.Fatalf("Extend of a batch with one cancelled delivery: %v; want one error", err)
	}
	var de *broker.DeliveryError
	if !errors.As(merr.Errors[0], &de) || de.Delivery != held[750] || !errors.Is(de, broker.ErrJobCanceled) {
		t.Fatalf("Extend reported %v; want ErrJobCanceled for %s", merr.Errors[0], held[750].ID)
	}
	for i, d := range batch {
		if !d.LeaseDeadline.After(before[i]) {
			t.Errorf("Extend left the lease of %s at %v", d.ID, before[i])
		}
	}
	if err := c.Ack(ctx, held...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

// TestCancelReadyNeverDeletesADeliveredEntry: a ready stretch whose cursor
// a consumer has read past since (the walk's previous stretch) starts at
// the group's last-delivered ID: the entry read meanwhile is in flight and
// stays, only entries not yet read are deleted.
func TestCancelReadyNeverDeletesADeliveredEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"))
	c := e.open("q", time.Hour)
	a := e.fetch(c, 1)[0]
	if a.ID != "a" {
		t.Fatalf("fetched %s, want a", a.ID)
	}
	found, next, err := stream.CancelStep(ctx, e.d, "q", "a", broker.JobReady, "0-1")
	if err != nil || found || next != "" {
		t.Fatalf("ready stretch from before a delivered entry, for it = %v, %q, %v; want not found, the end", found, next, err)
	}
	if _, _, _, ok := e.pending("q", a.Receipt); !ok {
		t.Fatal("the delivered entry is no longer pending")
	}
	if n, _ := e.rdb.XLen(ctx, e.key("q", "stream")).Result(); n != 2 {
		t.Fatalf("stream length %d, want 2", n)
	}
	found, _, err = stream.CancelStep(ctx, e.d, "q", "b", broker.JobReady, "0-1")
	if err != nil || !found {
		t.Fatalf("ready stretch from before a delivered entry, for the next one = %v, %v; want found", found, err)
	}
	if err := c.Ack(ctx, a); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if n, _ := e.rdb.Exists(ctx, e.key("q", "wake")).Result(); n != 0 {
		t.Fatal("the wake signal outlived the last entry")
	}
}

// TestCancelTakeoverRemovesEntry: a takeover of an expired lease whose
// delivery is marked deletes its entry and its mark, in the same pass that
// delivers the other entry it took over; the dead holder's settle is
// ErrLeaseLost, and nothing of the job is left.
func TestCancelTakeoverRemovesEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 20 * time.Millisecond})
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"))
	c1 := e.open("q", 100*time.Millisecond)
	ds := e.fetch(c1, 2)
	if len(ds) != 2 || ds[0].ID != "a" {
		t.Fatalf("fetched %v, want [a b]", ids(ds))
	}
	if st, err := e.d.CancelJob(ctx, "q", "a"); err != nil || st != broker.JobInFlight {
		t.Fatalf("CancelJob(a) = %v, %v; want JobInFlight", st, err)
	}

	c2 := e.open("q", 100*time.Millisecond)
	got := e.fetch(c2, 10)
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("took over %v, want [b]", ids(got))
	}
	if _, _, _, ok := e.pending("q", ds[0].Receipt); ok {
		t.Fatal("the cancelled entry is still pending")
	}
	if n, _ := e.rdb.Exists(ctx, e.key("q", "canceled")).Result(); n != 0 {
		t.Fatal("the mark outlived its entry")
	}
	if err := c1.Ack(ctx, ds[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack by the dead holder: %v, want ErrLeaseLost", err)
	}
	if got := e.d.Stats().Reclaimed; got != 1 {
		t.Fatalf("Stats().Reclaimed = %d, want 1 (the cancelled entry was not delivered again)", got)
	}
	if err := c2.Ack(ctx, got...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if n, _ := e.rdb.XLen(ctx, e.key("q", "stream")).Result(); n != 0 {
		t.Fatalf("stream length %d, want 0", n)
	}
	if st, err := e.d.CancelJob(ctx, "q", "a"); err != nil || st != 0 {
		t.Fatalf("CancelJob(a) after the takeover = %v, %v; want 0", st, err)
	}
}
