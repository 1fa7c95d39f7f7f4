package brokertest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func keepsRecords(c broker.Capabilities) bool { return c.Records && c.AtLeastOnce && c.Discard }

func recordsOf(t *testing.T, d broker.Driver) broker.Records {
	t.Helper()
	r, ok := d.(broker.Records)
	if !ok {
		t.Fatalf("driver %T has Capabilities.Records but does not implement broker.Records", d)
	}
	return r
}

// finish returns a record request of outcome for d, kept keep.
func finish(d *broker.Delivery, outcome string, keep time.Duration, result string) *broker.FinishRecord {
	return &broker.FinishRecord{Keep: keep, Record: broker.JobRecord{
		Queue: d.Queue, Kind: d.Kind, Outcome: outcome, Attempt: d.Attempt(), Recoveries: d.Recoveries,
		EnqueuedAt: d.EnqueuedAt, StartedAt: time.Now(), Worker: "brokertest", Result: []byte(result),
	}}
}

// testRecords proves the records of finished jobs: an Ack or Discard of a
// delivery that asks for a record writes it with the settle, one that does
// not writes none (no key at all while no delivery asked), a settle that
// fails (the lease is gone) writes none, records are found by ID and
// listed the latest to expire first, and the Inspector serves them as the
// finished state.
func testRecords(t *testing.T, e *env) {
	const q = "records"
	rs := recordsOf(t, e.d)
	ctx := Context(t, 60*time.Second)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: longLease})

	var ms []*broker.Message
	for i := range 5 {
		ms = append(ms, NewMessage(q, i))
	}
	Enqueue(t, e.d, ms...)
	ds := FetchN(t, c, 5, 5, 5*time.Second)

	// Without a request: no record and no key.
	if err := c.Ack(ctx, ds[0]); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if st, err := rs.RecordStats(ctx, q); err != nil || st.Count != 0 {
		t.Fatalf("RecordStats after a plain ack = %+v, %v; want no records", st, err)
	}
	if n := keysUnder(t, e.prefix, "done"); n != 0 {
		t.Fatalf("%d record keys after a plain ack, want 0", n)
	}

	// A batch where two of three ask, with different retentions.
	before := time.Now()
	ds[1].Finish = finish(ds[1], "acked", time.Hour, `{"ok":1}`)
	ds[3].Finish = finish(ds[3], "canceled", 2*time.Hour, "")
	ds[3].Finish.Record.Error = "job canceled"
	if err := c.Ack(ctx, ds[1], ds[2], ds[3]); err != nil {
		t.Fatalf("Ack of a batch with records: %v", err)
	}
	after := time.Now()
	for _, d := range []*broker.Delivery{ds[1], ds[3]} {
		r, err := rs.GetRecord(ctx, q, d.ID)
		if err != nil || r == nil {
			t.Fatalf("GetRecord(%s) = %v, %v; want its record", d.ID, r, err)
		}
		want := d.Finish.Record
		if r.ID != d.ID || r.Queue != q || r.Kind != d.Kind || r.Outcome != want.Outcome || r.Attempt != 1 ||
			r.Worker != "brokertest" || r.Error != want.Error || !bytes.Equal(r.Result, want.Result) ||
			!r.EnqueuedAt.Equal(want.EnqueuedAt) || !r.StartedAt.Equal(want.StartedAt) {
			t.Errorf("record of %s = %+v, want the request's %+v", d.ID, r, want)
		}
		if r.FinishedAt.Before(before.Add(-time.Second)) || r.FinishedAt.After(after.Add(time.Second)) {
			t.Errorf("record of %s finished at %v, want between %v and %v", d.ID, r.FinishedAt, before, after)
		}
		if got := r.ExpiresAt.Sub(r.FinishedAt); got != d.Finish.Keep {
			t.Errorf("record of %s expires %v after it finished, want %v", d.ID, got, d.Finish.Keep)
		}
	}
	if r, err := rs.GetRecord(ctx, q, ds[2].ID); err != nil || r != nil {
		t.Fatalf("GetRecord of a job acked without a request = %+v, %v; want nil", r, err)
	}

	// A settle that fails writes nothing: ds[0] is acked already.
	ds[0].Finish = finish(ds[0], "acked", time.Hour, "")
	checkLeaseLost(t, "Ack of an acked delivery", c.Ack(ctx, ds[0]), ds[0], true)
	if r, err := rs.GetRecord(ctx, q, ds[0].ID); err != nil || r != nil {
		t.Fatalf("GetRecord after a refused ack = %+v, %v; want nil", r, err)
	}

	// A batch of two refused settles, one with a request whose checks
	// fail: one flat list naming each delivery, nothing written.
	ds[2].Finish = &broker.FinishRecord{Keep: time.Microsecond}
	errs := batchErrors(c.Ack(ctx, ds[0], ds[2], ds[1]))
	if len(errs) != 3 {
		t.Fatalf("Ack of three settled deliveries, one with a refused request: %d errors, want one per delivery: %v", len(errs), errs)
	}
	for _, err := range errs {
		var de *broker.DeliveryError
		if !errors.As(err, &de) {
			t.Fatalf("batch error %v is not a *broker.DeliveryError", err)
		}
	}
	if r, err := rs.GetRecord(ctx, q, ds[2].ID); err != nil || r != nil {
		t.Fatalf("GetRecord after a refused request = %+v, %v; want nil", r, err)
	}

	// A discard.
	ds[4].Finish = finish(ds[4], "discarded", 30*time.Minute, "")
	ds[4].Finish.Record.Error = "bad input"
	if err := c.Discard(ctx, ds[4], "bad input"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	if r, err := rs.GetRecord(ctx, q, ds[4].ID); err != nil || r == nil || r.Outcome != "discarded" || r.Error != "bad input" {
		t.Fatalf("GetRecord of a discarded job = %+v, %v; want outcome discarded, error %q", r, err, "bad input")
	}

	// Listed the latest to expire first.
	page, total, err := rs.ListRecords(ctx, q, 0, 10)
	if err != nil || total != 3 || len(page) != 3 {
		t.Fatalf("ListRecords = %d records of %d, %v; want 3 of 3", len(page), total, err)
	}
	for i, want := range []string{ds[3].ID, ds[1].ID, ds[4].ID} {
		if page[i].ID != want {
			t.Fatalf("ListRecords[%d] = %s, want %s (the latest to expire first)", i, page[i].ID, want)
		}
	}
	if page, _, err := rs.ListRecords(ctx, q, 2, 10); err != nil || len(page) != 1 || page[0].ID != ds[4].ID {
		t.Fatalf("ListRecords from 2 = %v, %v; want [%s]", page, err, ds[4].ID)
	}
	if _, _, err := rs.ListRecords(ctx, q, 0, broker.MaxInspectPage+1); err == nil {
		t.Fatalf("ListRecords with a limit over %d: no error", broker.MaxInspectPage)
	}
	if st, err := rs.RecordStats(ctx, q); err != nil || st.Count != 3 || st.MaxCount < 1 {
		t.Fatalf("RecordStats = %+v, %v; want 3 records and a cap", st, err)
	}

	// The Inspector's finished state.
	if x, ok := e.d.(broker.Inspector); ok {
		j, err := x.FindJob(ctx, q, broker.JobFinished, ds[1].ID)
		if err != nil || j == nil || j.State != broker.JobFinished || j.Record == nil || j.Record.Outcome != "acked" || j.ID != ds[1].ID {
			t.Fatalf("FindJob(finished, %s) = %+v, %v", ds[1].ID, j, err)
		}
		if j, err := x.FindJob(ctx, q, broker.JobFinished, ds[2].ID); err != nil || j != nil {
			t.Fatalf("FindJob(finished) of a job without a record = %+v, %v; want nil", j, err)
		}
		js, n, err := x.ListJobs(ctx, q, broker.JobFinished, 0, 2)
		if err != nil || n != 3 || len(js) != 2 || js[0].ID != ds[3].ID {
			t.Fatalf("ListJobs(finished) = %d jobs of %d, %v", len(js), n, err)
		}
	}
}

// keysUnder counts the keys under prefix (on every master) whose last part
// starts with part: a queue's record keys are <prefix>:{<queue>}:done,
// done_at and done_counts.
func keysUnder(t *testing.T, prefix, part string) int {
	t.Helper()
	n := 0
	for _, k := range redistest.AllKeys(t, Client(t), prefix) {
		if strings.HasPrefix(k[strings.LastIndex(k, ":")+1:], part) {
			n++
		}
	}
	return n
}
