package conveyortest_test

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
)

// Records of finished jobs go by the driver's clock: one is served until
// the clock reaches Keep after its settle, then it is gone and counted as
// expired; past RecordMax the record soonest to expire goes, counted as
// dropped; when the last one expires the counts go with it, as the Redis
// drivers' keys do.
func TestRecordRetentionByClock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const q = "records"
	clock := conveyortest.NewClock(time.Time{})
	d, err := conveyortest.New(&conveyortest.Config{Clock: clock, RecordMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c", "d", "e"}
	for _, id := range ids {
		if err := d.Enqueue(ctx, []*broker.Message{{ID: id, Kind: "k", Queue: q}}); err != nil {
			t.Fatal(err)
		}
	}
	// A lease longer than the test moves the clock, so that every settle
	// below holds its lease.
	c, err := d.Open(ctx, q, &broker.ConsumerOptions{VisibilityTimeout: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	ds, err := c.Fetch(ctx, len(ids))
	if err != nil || len(ds) != len(ids) {
		t.Fatalf("Fetch = %d deliveries, %v; want %d", len(ds), err, len(ids))
	}
	dl := map[string]*broker.Delivery{}
	for _, x := range ds {
		dl[x.ID] = x
	}
	ask := func(id string, keep time.Duration) {
		dl[id].Finish = &broker.FinishRecord{Keep: keep, Record: broker.JobRecord{Queue: q, Kind: "k", Outcome: "acked", Attempt: 1}}
	}
	get := func(id string) *broker.JobRecord {
		t.Helper()
		r, err := d.GetRecord(ctx, q, id)
		if err != nil {
			t.Fatalf("GetRecord(%s): %v", id, err)
		}
		return r
	}
	stats := func(want broker.RecordStats) {
		t.Helper()
		want.MaxCount = 2
		if st, err := d.RecordStats(ctx, q); err != nil || st != want {
			t.Fatalf("RecordStats = %+v, %v; want %+v", st, err, want)
		}
	}

	// A request the Redis drivers refuse fails the settle: no record, and
	// the job stays in flight.
	ask("e", time.Microsecond)
	if err := c.Ack(ctx, dl["e"]); err == nil {
		t.Fatal("Ack with a Keep under 1ms: no error")
	}
	if r := get("e"); r != nil {
		t.Fatalf("record after a refused Ack: %+v", r)
	}
	dl["e"].Finish = nil
	if err := c.Ack(ctx, dl["e"]); err != nil {
		t.Fatalf("Ack without a record after a refused one: %v; want the lease still held", err)
	}

	start := clock.Now()
	ask("a", time.Hour)
	ask("b", 3*time.Hour)
	if err := c.Ack(ctx, dl["a"], dl["b"]); err != nil {
		t.Fatal(err)
	}
	r := get("a")
	if r == nil || !r.FinishedAt.Equal(start) || !r.ExpiresAt.Equal(start.Add(time.Hour)) {
		t.Fatalf("record of a = %+v; want finished at %v, expiring an hour later", r, start)
	}

	// Expiry by the clock: there a moment before Keep ends, gone at it.
	clock.Advance(time.Hour - time.Millisecond)
	if get("a") == nil {
		t.Fatal("record of a gone before its Keep ran out")
	}
	clock.Advance(time.Millisecond)
	if r := get("a"); r != nil {
		t.Fatalf("record of a = %+v when its Keep ran out; want gone", r)
	}
	stats(broker.RecordStats{Count: 1, Expired: 1})

	// Over the cap of 2: c, the soonest to expire, goes.
	ask("c", time.Hour)   // expires at start+2h
	ask("d", 5*time.Hour) // start+6h
	dl["d"].Finish.Record.Outcome = "discarded"
	if err := c.Ack(ctx, dl["c"]); err != nil {
		t.Fatal(err)
	}
	if err := c.Discard(ctx, dl["d"], "bad input"); err != nil {
		t.Fatal(err)
	}
	if r := get("c"); r != nil {
		t.Fatalf("record of c, the soonest to expire over the cap, = %+v; want dropped", r)
	}
	stats(broker.RecordStats{Count: 2, Expired: 1, DroppedByCount: 1})
	page, total, err := d.ListRecords(ctx, q, 0, 10)
	if err != nil || total != 2 || len(page) != 2 || page[0].ID != "d" || page[1].ID != "b" {
		t.Fatalf("ListRecords = %v of %d, %v; want [d b]", page, total, err)
	}
	if page[0].Outcome != "discarded" {
		t.Fatalf("record of d: outcome %q, want discarded", page[0].Outcome)
	}

	// The last record expires, and the counts with it.
	clock.Advance(5 * time.Hour)
	stats(broker.RecordStats{})
}

func TestDeleteQueueDropsRecords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const q = "records"
	d, err := conveyortest.New(&conveyortest.Config{Clock: conveyortest.NewClock(time.Time{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Enqueue(ctx, []*broker.Message{{ID: "a", Kind: "k", Queue: q}}); err != nil {
		t.Fatal(err)
	}
	c, err := d.Open(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	ds, err := c.Fetch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ds[0].Finish = &broker.FinishRecord{Keep: time.Hour, Record: broker.JobRecord{Queue: q, Kind: "k", Outcome: "acked", Attempt: 1}}
	if err := c.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	if r, err := d.GetRecord(ctx, q, "a"); err != nil || r == nil {
		t.Fatalf("GetRecord before the delete = %+v, %v; want the record", r, err)
	}
	if _, err := d.DeleteQueue(ctx, q, false); err != nil {
		t.Fatal(err)
	}
	if r, err := d.GetRecord(ctx, q, "a"); err != nil || r != nil {
		t.Fatalf("GetRecord after the delete = %+v, %v; want none", r, err)
	}
	if st, err := d.RecordStats(ctx, q); err != nil || st.Count != 0 {
		t.Fatalf("RecordStats after the delete = %+v, %v; want none", st, err)
	}
}
