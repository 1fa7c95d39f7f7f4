package conveyor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// inspectEnv is one durable driver with a client and an inspector on it.
type inspectEnv struct {
	t      *testing.T
	ctx    context.Context
	d      broker.Driver
	client *conveyor.Client
	insp   *conveyor.Inspector
}

func newInspectEnv(t *testing.T, dt drivertest.Driver) *inspectEnv {
	t.Helper()
	d := dt.Must(t, redistest.Client(t), redistest.Prefix(t))
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "work"})
	if err != nil {
		t.Fatal(err)
	}
	insp, err := conveyor.NewInspector(d, &conveyor.InspectorConfig{DefaultLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &inspectEnv{t: t, ctx: ctx, d: d, client: c, insp: insp}
}

func (e *inspectEnv) enqueue(kind, id string, opts *conveyor.EnqueueOptions) *broker.Message {
	e.t.Helper()
	var o conveyor.EnqueueOptions
	if opts != nil {
		o = *opts
	}
	o.ID = id
	m, err := e.client.Enqueue(e.ctx, kind, map[string]string{"id": id}, &o)
	if err != nil {
		e.t.Fatalf("Enqueue(%s): %v", id, err)
	}
	return m
}

func (e *inspectEnv) sizes(queue string) *conveyor.QueueSizes {
	e.t.Helper()
	s, err := e.insp.Queue(e.ctx, queue)
	if err != nil {
		e.t.Fatalf("Queue(%q): %v", queue, err)
	}
	return s
}

// wantSizes compares the per-state sizes and counters of s.
func (e *inspectEnv) wantSizes(when string, s *conveyor.QueueSizes, ready, inFlight, delayed, discarded, processed, failed int64) {
	e.t.Helper()
	got := []int64{s.Ready, s.InFlight, s.Delayed, s.Discarded, s.Processed, s.Failed}
	want := []int64{ready, inFlight, delayed, discarded, processed, failed}
	if !slices.Equal(got, want) {
		e.t.Fatalf("%s: ready, in flight, delayed, discarded, processed, failed = %v, want %v", when, got, want)
	}
	if s.Discards.Count != s.Discarded {
		e.t.Fatalf("%s: Discards.Count %d != Discarded %d", when, s.Discards.Count, s.Discarded)
	}
}

// allJobs pages through a state with the default page size (4), following
// JobPage.Next, and checks each page against the total.
func (e *inspectEnv) allJobs(queue string, state conveyor.JobState) []*conveyor.JobInfo {
	e.t.Helper()
	var out []*conveyor.JobInfo
	var opts *conveyor.ListOptions
	for range 1000 {
		p, err := e.insp.Jobs(e.ctx, queue, state, opts)
		if err != nil {
			e.t.Fatalf("Jobs(%q, %v, %+v): %v", queue, state, opts, err)
		}
		if p.Limit != 4 || len(p.Jobs) > 4 {
			e.t.Fatalf("Jobs(%v) page of %d jobs with limit %d, want at most the default 4", state, len(p.Jobs), p.Limit)
		}
		for _, j := range p.Jobs {
			if j.State != state || j.Queue != queue {
				e.t.Fatalf("Jobs(%q, %v) returned %s in state %v of %q", queue, state, j.ID, j.State, j.Queue)
			}
		}
		out = append(out, p.Jobs...)
		next, more := p.Next()
		if !more {
			if int64(len(out)) != p.Total {
				e.t.Fatalf("Jobs(%v): pages hold %d jobs, Total says %d", state, len(out), p.Total)
			}
			return out
		}
		opts = &conveyor.ListOptions{Offset: next}
	}
	e.t.Fatal("Jobs: more than 1000 pages")
	return nil
}

func ids(js []*conveyor.JobInfo) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// TestInspector runs the Inspector over a queue with jobs in every state on
// each durable driver: sizes and counters, pages of each state, a job by
// ID in each state, re-drive, cancel and purge.
func TestInspector(t *testing.T) {
	t.Parallel()
	for _, dt := range drivertest.Durable {
		t.Run(dt.Name, func(t *testing.T) {
			t.Parallel()
			testInspector(t, newInspectEnv(t, dt))
		})
	}
}

func testInspector(t *testing.T, e *inspectEnv) {
	const q = "work"
	// Ten ready jobs of two kinds, three delayed ones with business keys.
	for i := range 10 {
		kind := "mail"
		if i%2 == 1 {
			kind = "sms"
		}
		e.enqueue(kind, fmt.Sprintf("job-%02d", i), nil)
	}
	base := time.Now().Add(time.Hour)
	for i := range 3 {
		e.enqueue("order.timeout", fmt.Sprintf("order:%d:timeout", i), &conveyor.EnqueueOptions{RunAt: base.Add(time.Duration(2-i) * time.Minute)})
	}
	e.enqueue("other", "elsewhere", &conveyor.EnqueueOptions{Queue: "other"})
	if qs, err := e.insp.Queues(e.ctx); err != nil || !slices.Equal(qs, []string{"other", q}) {
		t.Fatalf("Queues = %q, %v; want [other work]", qs, err)
	}
	e.wantSizes("after enqueue", e.sizes(q), 10, 0, 3, 0, 0, 0)

	// Fetch six (FIFO: job-00 to job-05): ack two, retry one, discard two,
	// keep one in flight.
	c, err := e.d.Open(e.ctx, q, &broker.ConsumerOptions{VisibilityTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	var ds []*broker.Delivery
	for len(ds) < 6 {
		got, err := c.Fetch(e.ctx, 6-len(ds))
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		ds = append(ds, got...)
	}
	if got := deliveryIDs(ds); !slices.Equal(got, []string{"job-00", "job-01", "job-02", "job-03", "job-04", "job-05"}) {
		t.Fatalf("fetched %q, want job-00 to job-05", got)
	}
	if err := c.Ack(e.ctx, ds[0], ds[1]); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := c.Retry(e.ctx, ds[2], time.Time{}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if err := c.Discard(e.ctx, ds[3], "mail bounced"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	if err := c.Discard(e.ctx, ds[4], "no such number"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	s := e.sizes(q)
	e.wantSizes("after settling", s, 5, 1, 3, 2, 2, 3)
	if s.Queue != q || s.Discards.Oldest.IsZero() || s.Discards.MaxCount != broker.DefaultDiscardMax {
		t.Fatalf("Queue(%q) = %+v, want its name and the discard queue's figures", q, s)
	}
	all, err := e.insp.AllQueues(e.ctx)
	if err != nil || len(all) != 2 || all[0].Queue != "other" || all[0].Ready != 1 || all[1].Queue != q || all[1].Ready != 5 {
		t.Fatalf("AllQueues = %+v, %v; want other (1 ready) and work (5 ready)", all, err)
	}

	// Pages of each state, in the state's order.
	ready := e.allJobs(q, conveyor.JobReady)
	if got, want := ids(ready), []string{"job-06", "job-07", "job-08", "job-09", "job-02"}; !slices.Equal(got, want) {
		t.Fatalf("ready jobs %q, want next-to-run first %q", got, want)
	}
	if r := ready[4]; r.Kind != "mail" || r.Retries != 1 || string(r.Payload) != `{"id":"job-02"}` {
		t.Fatalf("retried job-02 listed as %+v, want kind mail, attempt 1, its payload", r.Message)
	}
	inflight := e.allJobs(q, conveyor.JobInFlight)
	if len(inflight) != 1 || inflight[0].ID != "job-05" || (inflight[0].LeaseDeadline.IsZero() && inflight[0].Consumer == "") {
		t.Fatalf("in-flight jobs %+v, want job-05 with its lease or consumer", inflight)
	}
	delayed := e.allJobs(q, conveyor.JobDelayed)
	if got, want := ids(delayed), []string{"order:2:timeout", "order:1:timeout", "order:0:timeout"}; !slices.Equal(got, want) {
		t.Fatalf("delayed jobs %q, want earliest first %q", got, want)
	}
	discarded := e.allJobs(q, conveyor.JobDiscarded)
	if got := ids(discarded); !slices.Equal(got, []string{"job-04", "job-03"}) || discarded[0].Reason != "no such number" {
		t.Fatalf("discarded jobs %q (first reason %q), want newest first [job-04 job-03]", got, discarded[0].Reason)
	}
	if p, err := e.insp.Jobs(e.ctx, q, conveyor.JobReady, &conveyor.ListOptions{Offset: 3, Limit: 1000}); err != nil ||
		!slices.Equal(ids(p.Jobs), []string{"job-09", "job-02"}) || p.Total != 5 {
		t.Fatalf("Jobs(ready, offset 3) = %+v, %v", p, err)
	}

	// A job by ID, in each state; cheapest state first by default.
	for id, state := range map[string]conveyor.JobState{
		"order:1:timeout": conveyor.JobDelayed, "job-05": conveyor.JobInFlight,
		"job-03": conveyor.JobDiscarded, "job-08": conveyor.JobReady,
	} {
		j, err := e.insp.Job(e.ctx, q, id)
		if err != nil || j.ID != id || j.State != state {
			t.Fatalf("Job(%s) = %+v, %v; want it %v", id, j, err, state)
		}
	}
	// The due time is the server's now plus the wait the client sent: on
	// one machine, never before the RunAt asked and after it by at most
	// the time the call took.
	if j, err := e.insp.Job(e.ctx, q, "order:1:timeout"); err != nil || j.RunAt.Before(dueMs(base.Add(time.Minute))) ||
		j.RunAt.Sub(dueMs(base.Add(time.Minute))) > time.Second {
		t.Fatalf("Job(order:1:timeout) = %+v, %v; want RunAt %v", j, err, dueMs(base.Add(time.Minute)))
	}
	if _, err := e.insp.Job(e.ctx, q, "nosuch"); !errors.Is(err, conveyor.ErrJobNotFound) {
		t.Fatalf("Job(nosuch): %v, want ErrJobNotFound", err)
	}
	if _, err := e.insp.Job(e.ctx, q, "job-08", conveyor.JobDelayed, conveyor.JobDiscarded); !errors.Is(err, conveyor.ErrJobNotFound) {
		t.Fatalf("Job(job-08) among delayed and discarded: %v, want ErrJobNotFound", err)
	}
	if _, err := e.insp.Job(e.ctx, "other", "job-08"); !errors.Is(err, conveyor.ErrJobNotFound) {
		t.Fatalf("Job(job-08) in another queue: %v, want ErrJobNotFound", err)
	}

	// Re-drive the sms discard, cancel a timer.
	if n, err := e.insp.Redrive(e.ctx, q, broker.DiscardFilter{Kind: "sms"}, 0); err != nil || n != 1 {
		t.Fatalf("Redrive(kind sms) = %d, %v; want 1", n, err)
	}
	if j, err := e.insp.Job(e.ctx, q, "job-03"); err != nil || j.State != conveyor.JobReady || j.Retries != 0 {
		t.Fatalf("re-driven job-03 = %+v, %v; want it ready", j, err)
	}
	at := time.Now().Add(3 * time.Hour)
	if ok, err := e.insp.Reschedule(e.ctx, q, "order:0:timeout", at); err != nil || !ok {
		t.Fatalf("Reschedule(order:0:timeout) = %v, %v; want true", ok, err)
	}
	if j, err := e.insp.Job(e.ctx, q, "order:0:timeout", conveyor.JobDelayed); err != nil || j.RunAt.Before(at.Add(-time.Second)) || j.RunAt.After(at.Add(time.Second)) {
		t.Fatalf("rescheduled timer = %+v, %v; want due at %v", j, err, at)
	}
	if ok, err := e.insp.Reschedule(e.ctx, q, "nosuch", at); err != nil || ok {
		t.Fatalf("Reschedule(nosuch) = %v, %v; want false", ok, err)
	}
	if ok, err := e.insp.Cancel(e.ctx, q, "order:0:timeout"); err != nil || !ok {
		t.Fatalf("Cancel(order:0:timeout) = %v, %v; want true", ok, err)
	}
	if ok, err := e.insp.Cancel(e.ctx, q, "order:0:timeout"); err != nil || ok {
		t.Fatalf("second Cancel = %v, %v; want false", ok, err)
	}
	e.wantSizes("after redrive and cancel", e.sizes(q), 6, 1, 2, 1, 2, 3)

	// Purge: two ready (next-to-run first), every delayed and discarded
	// job; in-flight jobs are refused.
	if n, err := e.insp.Purge(e.ctx, q, conveyor.JobReady, 2); err != nil || n != 2 {
		t.Fatalf("Purge(ready, 2) = %d, %v; want 2", n, err)
	}
	if got := ids(e.allJobs(q, conveyor.JobReady)); !slices.Equal(got, []string{"job-08", "job-09", "job-02", "job-03"}) {
		t.Fatalf("ready after Purge(ready, 2) = %q, want job-06 and job-07 gone", got)
	}
	for state, want := range map[conveyor.JobState]int{conveyor.JobDelayed: 2, conveyor.JobDiscarded: 1} {
		if n, err := e.insp.Purge(e.ctx, q, state, 0); err != nil || n != want {
			t.Fatalf("Purge(%v, 0) = %d, %v; want %d", state, n, err, want)
		}
	}
	if _, err := e.insp.Purge(e.ctx, q, conveyor.JobInFlight, 0); err == nil || !strings.Contains(err.Error(), "in-flight") {
		t.Fatalf("Purge(in flight): %v, want a refusal naming in-flight jobs", err)
	}
	e.wantSizes("after purges", e.sizes(q), 4, 1, 0, 0, 2, 3)
	if err := c.Ack(e.ctx, ds[5]); err != nil {
		t.Fatalf("Ack of the in-flight job after the purges: %v", err)
	}
	e.wantSizes("after the last ack", e.sizes(q), 4, 0, 0, 0, 3, 3)
}

// dueMs is the due time a driver keeps for t: whole milliseconds, rounded
// up.
func dueMs(t time.Time) time.Time {
	return time.UnixMilli((t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond))
}

func deliveryIDs(ds []*broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// TestInspectorBadInput: hostile queue names, bad pages, states and
// maxima are refused with errors that say so, before any I/O.
func TestInspectorBadInput(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t, drivertest.Durable[0])
	for _, q := range []string{"", "a{b", "{q}", "a}b", "a b", "a\nb", strings.Repeat("q", 129), "\xff"} {
		_, err1 := e.insp.Queue(e.ctx, q)
		_, err2 := e.insp.Jobs(e.ctx, q, conveyor.JobReady, nil)
		_, err3 := e.insp.Job(e.ctx, q, "x")
		_, err4 := e.insp.Redrive(e.ctx, q, broker.DiscardFilter{}, 0)
		_, err5 := e.insp.Cancel(e.ctx, q, "x")
		_, err6 := e.insp.Purge(e.ctx, q, conveyor.JobReady, 0)
		for i, err := range []error{err1, err2, err3, err4, err5, err6} {
			var qe *broker.QueueNameError
			if !errors.Is(err, conveyor.ErrInvalidQueue) || !errors.As(err, &qe) || qe.Name != q {
				t.Errorf("call %d with queue %q: %v, want a *broker.QueueNameError naming it", i+1, q, err)
			}
		}
	}
	for _, o := range []*conveyor.ListOptions{{Offset: -1}, {Limit: -1}, {Limit: 1001}} {
		if _, err := e.insp.Jobs(e.ctx, "q", conveyor.JobReady, o); err == nil {
			t.Errorf("Jobs with %+v: nil error", o)
		}
	}
	for _, s := range []conveyor.JobState{0, 6, -1} {
		if _, err := e.insp.Jobs(e.ctx, "q", s, nil); err == nil || !strings.Contains(err.Error(), "not a job state") {
			t.Errorf("Jobs in state %d: %v, want an error saying it is not a job state", s, err)
		}
		if _, err := e.insp.Job(e.ctx, "q", "x", s); err == nil {
			t.Errorf("Job in state %d: nil error", s)
		}
		if _, err := e.insp.Purge(e.ctx, "q", s, 0); err == nil {
			t.Errorf("Purge of state %d: nil error", s)
		}
	}
	if _, err := e.insp.Job(e.ctx, "q", "a{b"); !errors.Is(err, conveyor.ErrInvalidMessage) {
		t.Errorf("Job with a brace in the ID: %v, want ErrInvalidMessage", err)
	}
	if _, err := e.insp.Purge(e.ctx, "q", conveyor.JobReady, -1); err == nil {
		t.Error("Purge with a negative max: nil error")
	}
	if _, err := e.insp.Redrive(e.ctx, "q", broker.DiscardFilter{}, -1); err == nil {
		t.Error("Redrive with a negative max: nil error")
	}
	for _, limit := range []int{-1, 1001} {
		if _, err := conveyor.NewInspector(e.d, &conveyor.InspectorConfig{DefaultLimit: limit}); err == nil {
			t.Errorf("NewInspector with DefaultLimit %d: nil error", limit)
		}
	}
	if _, err := conveyor.NewInspector(nil, nil); err == nil {
		t.Error("NewInspector(nil): nil error")
	}
	if qs, err := e.insp.Queues(e.ctx); err != nil || len(qs) != 0 {
		t.Errorf("Queues after refused calls = %q, %v; want none", qs, err)
	}
}

// TestInspectorPubsub: the pub/sub driver stores nothing to inspect.
func TestInspectorPubsub(t *testing.T) {
	t.Parallel()
	d, err := pubsub.New(redistest.Client(t), &pubsub.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conveyor.NewInspector(d, nil); !errors.Is(err, conveyor.ErrUnsupported) {
		t.Fatalf("NewInspector(pubsub): %v, want ErrUnsupported", err)
	}
}

// TestInspectorQueueIsOneRoundTrip: Queue reads every figure of a queue in
// one round trip, and AllQueues every queue's in two.
func TestInspectorQueueIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	for _, dt := range drivertest.Durable {
		t.Run(dt.Name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.NewClient(t)
			d := dt.Must(t, rdb, redistest.Prefix(t))
			insp, err := conveyor.NewInspector(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			c, err := conveyor.NewClient(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, q := range []string{"a", "b", "c"} {
				if _, err := c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{Queue: q}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := insp.AllQueues(ctx); err != nil { // loads the script
				t.Fatal(err)
			}
			rt := &roundTrips{}
			rdb.AddHook(rt)
			s, err := insp.Queue(ctx, "b")
			if err != nil || s.Ready != 1 {
				t.Fatalf("Queue(b) = %+v, %v", s, err)
			}
			if n := rt.n.Load(); n != 1 {
				t.Fatalf("Queue took %d round trips, want 1", n)
			}
			all, err := insp.AllQueues(ctx)
			if err != nil || len(all) != 3 {
				t.Fatalf("AllQueues = %+v, %v", all, err)
			}
			if n := rt.n.Load(); n != 3 {
				t.Fatalf("AllQueues of 3 queues took %d round trips, want 2", n-1)
			}
		})
	}
}

// BenchmarkInspectorQueue measures Inspector.Queue (one script call reading
// every figure of a queue with jobs in every state) against a bare PING, in
// the same run: the ratio is the cost of the script over a round trip.
func BenchmarkInspectorQueue(b *testing.B) {
	rdb := redistest.NewClient(b)
	ctx := context.Background()
	for _, dt := range drivertest.Durable {
		b.Run(dt.Name, func(b *testing.B) {
			d := dt.Must(b, rdb, redistest.Prefix(b))
			insp, err := conveyor.NewInspector(d, nil)
			if err != nil {
				b.Fatal(err)
			}
			c, err := conveyor.NewClient(d, nil)
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([]conveyor.Request, 200)
			for i := range reqs {
				reqs[i] = conveyor.Request{Kind: "k", Args: payload100}
				if i%4 == 0 {
					reqs[i].Opts = &conveyor.EnqueueOptions{Delay: time.Hour}
				}
			}
			if _, err := c.EnqueueMany(ctx, reqs...); err != nil {
				b.Fatal(err)
			}
			cons, err := d.Open(ctx, "default", &broker.ConsumerOptions{VisibilityTimeout: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close(ctx)
			ds, err := cons.Fetch(ctx, 20)
			if err != nil {
				b.Fatal(err)
			}
			if err := cons.Discard(ctx, ds[0], "bench"); err != nil {
				b.Fatal(err)
			}
			if _, err := insp.Queue(ctx, "default"); err != nil {
				b.Fatal(err)
			}
			var tPing, tQueue time.Duration
			const round = 500
			n := 0
			for n < b.N {
				t0 := time.Now()
				for range round {
					if err := rdb.Ping(ctx).Err(); err != nil {
						b.Fatal(err)
					}
				}
				tPing += time.Since(t0)
				t0 = time.Now()
				for range round {
					if _, err := insp.Queue(ctx, "default"); err != nil {
						b.Fatal(err)
					}
				}
				tQueue += time.Since(t0)
				n += round
			}
			b.ReportMetric(float64(tPing.Microseconds())/float64(n), "ping-µs/op")
			b.ReportMetric(float64(tQueue.Microseconds())/float64(n), "queue-µs/op")
			b.ReportMetric(float64(tQueue)/float64(tPing), "queue/ping")
		})
	}
}
