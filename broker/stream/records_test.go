package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
)

// finishRecord asks for a record of d's job with outcome, kept keep.
func finishRecord(d *broker.Delivery, outcome string, keep time.Duration) *broker.FinishRecord {
	return &broker.FinishRecord{Keep: keep, Record: broker.JobRecord{
		Queue: d.Queue, Kind: d.Kind, Outcome: outcome, Attempt: d.Attempt(), Recoveries: d.Recoveries,
		EnqueuedAt: d.EnqueuedAt, StartedAt: time.Now(), Worker: "records_test",
	}}
}

// takeOver claims d's entry for another consumer of the group, as a
// takeover of an expired lease would: d's holder has lost its lease, and
// the entry is still in the stream.
func (e *env) takeOver(queue string, d *broker.Delivery) {
	e.t.Helper()
	err := e.rdb.XClaim(context.Background(), &redis.XClaimArgs{
		Stream: e.key(queue, "stream"), Group: "conveyor", Consumer: "other", Messages: []string{d.Receipt},
	}).Err()
	if err != nil {
		e.t.Fatalf("XCLAIM %s: %v", d.Receipt, err)
	}
}

// checkRecord fails the test unless the record of d's job is the one d
// asked for, written between before and after (the server's clock, a
// second's leeway) and expiring keep later.
func (e *env) checkRecord(queue string, d *broker.Delivery, before, after time.Time) {
	e.t.Helper()
	r, err := e.d.GetRecord(context.Background(), queue, d.ID)
	if err != nil || r == nil {
		e.t.Fatalf("GetRecord(%s) = %v, %v; want its record", d.ID, r, err)
	}
	want := d.Finish.Record
	if r.ID != d.ID || r.Queue != queue || r.Kind != d.Kind || r.Outcome != want.Outcome || r.Attempt != want.Attempt ||
		r.Recoveries != want.Recoveries || r.Error != want.Error || r.Worker != want.Worker ||
		!r.EnqueuedAt.Equal(want.EnqueuedAt) || !r.StartedAt.Equal(want.StartedAt) {
		e.t.Errorf("record of %s = %+v, want %+v", d.ID, r, want)
	}
	if r.FinishedAt.Before(before.Add(-time.Second)) || r.FinishedAt.After(after.Add(time.Second)) {
		e.t.Errorf("record of %s: FinishedAt %v, want between %v and %v", d.ID, r.FinishedAt, before, after)
	}
	if got := r.ExpiresAt.Sub(r.FinishedAt); got != d.Finish.Keep {
		e.t.Errorf("record of %s: ExpiresAt - FinishedAt = %v, want Keep %v", d.ID, got, d.Finish.Keep)
	}
}

// noRecord fails the test if d's job has a record.
func (e *env) noRecord(queue string, d *broker.Delivery) {
	e.t.Helper()
	if r, err := e.d.GetRecord(context.Background(), queue, d.ID); err != nil || r != nil {
		e.t.Errorf("GetRecord(%s) = %+v, %v; want no record", d.ID, r, err)
	}
}

// An ack of a batch writes the records of exactly the deliveries that ask
// for one and settle: not of those that do not ask, nor of one whose lease
// was lost (taken over, or settled already).
func TestAckRecords(t *testing.T) {
	t.Parallel()
	const q = "q"
	e := newEnv(t, nil)
	e.enqueue(msg(q, "a"), msg(q, "b"), msg(q, "c"), msg(q, "d"), msg(q, "e"), msg(q, "f"), msg(q, "g"))
	c := e.open(q, time.Minute)
	ctx := context.Background()
	ds := e.fetch(c, 7)
	if len(ds) != 7 {
		t.Fatalf("fetched %v, want 7", ids(ds))
	}
	a, b, cc, d, e5, f, g := ds[0], ds[1], ds[2], ds[3], ds[4], ds[5], ds[6]

	// A plain ack touches no record key.
	if err := c.Ack(ctx, f); err != nil {
		t.Fatalf("plain Ack: %v", err)
	}
	if n, err := e.rdb.Exists(ctx, e.key(q, "done"), e.key(q, "done_at"), e.key(q, "done_counts")).Result(); err != nil || n != 0 {
		t.Fatalf("record keys after a plain ack: %d, %v; want none", n, err)
	}

	a.Finish = finishRecord(a, "acked", time.Hour)
	cc.Finish = finishRecord(cc, "canceled", 2*time.Hour)
	cc.Finish.Record.Error = "job canceled"
	d.Finish = finishRecord(d, "acked", time.Hour)
	e.takeOver(q, d)

	before := time.Now()
	err := c.Ack(ctx, a, b, cc, d, e5)
	after := time.Now()
	var merr *multierror.Error
	var derr *broker.DeliveryError
	if !errors.As(err, &merr) || len(merr.Errors) != 1 || !errors.As(merr.Errors[0], &derr) || derr.Delivery != d ||
		!errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack of the batch = %v; want ErrLeaseLost for %s alone", err, d.ID)
	}
	e.checkRecord(q, a, before, after)
	e.checkRecord(q, cc, before, after)
	e.noRecord(q, b)
	e.noRecord(q, d)
	e.noRecord(q, e5)
	if owner, _, _, ok := e.pending(q, d.Receipt); !ok || owner != "other" {
		t.Fatalf("entry of %s: pending %v for %q, want still the taker's", d.ID, ok, owner)
	}

	// Settled already: a second ack, now asking for a record, writes none.
	b.Finish = finishRecord(b, "acked", time.Hour)
	if err := c.Ack(ctx, b); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("second Ack of %s = %v, want ErrLeaseLost", b.ID, err)
	}
	e.noRecord(q, b)

	// A record the driver cannot keep (Keep under 1ms) is refused before
	// the script: the delivery is not acked, and can be settled again.
	g.Finish = &broker.FinishRecord{Keep: time.Microsecond, Record: broker.JobRecord{Outcome: "acked", Attempt: 1}}
	if err := c.Ack(ctx, g); err == nil || errors.Is(err, broker.ErrLeaseLost) || errors.Is(err, broker.ErrJobCanceled) {
		t.Fatalf("Ack with Keep 1µs = %v, want it refused", err)
	}
	if owner, _, _, ok := e.pending(q, g.Receipt); !ok || owner != stream.ConsumerName(c) {
		t.Fatalf("entry of %s after a refused ack: pending %v for %q, want still c's", g.ID, ok, owner)
	}
	e.noRecord(q, g)
	g.Finish = nil
	if err := c.Ack(ctx, g); err != nil {
		t.Fatalf("Ack of %s after the refusal: %v", g.ID, err)
	}

	st, err := e.d.RecordStats(ctx, q)
	if err != nil || st.Count != 2 || st.Expired != 0 || st.DroppedByCount != 0 || st.MaxCount != broker.DefaultRecordMax {
		t.Fatalf("RecordStats = %+v, %v; want 2 records and the default cap", st, err)
	}
}

// A discard that asks for a record writes it with the discard; one whose
// lease was lost writes neither.
func TestDiscardRecord(t *testing.T) {
	t.Parallel()
	const q = "q"
	e := newEnv(t, nil)
	e.enqueue(msg(q, "a"), msg(q, "b"))
	c := e.open(q, time.Minute)
	ctx := context.Background()
	ds := e.fetch(c, 2)
	if len(ds) != 2 {
		t.Fatalf("fetched %v, want 2", ids(ds))
	}
	a, b := ds[0], ds[1]

	a.Finish = finishRecord(a, "discarded", time.Hour)
	a.Finish.Record.Error = "boom"
	before := time.Now()
	if err := c.Discard(ctx, a, "boom"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	e.checkRecord(q, a, before, time.Now())

	b.Finish = finishRecord(b, "discarded", time.Hour)
	e.takeOver(q, b)
	if err := c.Discard(ctx, b, "boom"); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Discard after a takeover = %v, want ErrLeaseLost", err)
	}
	e.noRecord(q, b)
	if n, err := e.rdb.LLen(ctx, e.key(q, "dead")).Result(); err != nil || n != 1 {
		t.Fatalf("discard list holds %d, %v; want 1 (a's)", n, err)
	}
}
