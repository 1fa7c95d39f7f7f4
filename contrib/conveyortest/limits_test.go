package conveyortest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/worker"
)

// setLimit sets queue's limit of kind to n on e's driver.
func (e *env) setLimit(t *testing.T, queue, kind string, n int) {
	t.Helper()
	if err := e.d.SetLimit(context.Background(), queue, kind, n); err != nil {
		t.Fatalf("SetLimit(%q, %q, %d): %v", queue, kind, n, err)
	}
}

// wantLimits fails t unless queue's limits read want.
func (e *env) wantLimits(t *testing.T, queue string, want ...broker.Limit) {
	t.Helper()
	got, err := e.d.Limits(context.Background(), queue)
	if err != nil {
		t.Fatalf("Limits(%q): %v", queue, err)
	}
	if len(got) != len(want) {
		t.Fatalf("Limits(%q) = %+v, want %+v", queue, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("Limits(%q) = %+v, want %+v", queue, got, want)
		}
	}
}

// open returns a consumer of queue on e's driver, closed when t ends.
func (e *env) open(t *testing.T, queue string, opts *broker.ConsumerOptions) broker.Consumer {
	t.Helper()
	c, err := e.d.Open(context.Background(), queue, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// A Runner's Drain runs every job under a limit: each job it runs gives
// its slot back before the next is fetched. The jobs a slot held elsewhere
// keeps out wait, counted as Limited, and Drain runs them once it comes
// back.
func TestDrainRunsEveryJobUnderALimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.setLimit(t, "default", "email.receipt", 1)
	var ran []string
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		ran = append(ran, r.OrderID)
		return nil
	})
	mux.HandleFunc("other", func(ctx context.Context, job *conveyor.Job) error {
		ran = append(ran, "other")
		return nil
	})
	r := e.runner(t, mux, nil)

	// Another worker of the fleet holds the limit's one slot.
	e.enqueue(t, "email.receipt", Receipt{OrderID: "held"}, nil)
	held := e.open(t, "default", nil)
	ds, err := held.Fetch(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch: %d deliveries, %v; want the one job", len(ds), err)
	}
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		e.enqueue(t, "email.receipt", Receipt{OrderID: id}, nil)
	}
	e.enqueue(t, "other", nil, nil)
	if res := drain(t, r, "default"); len(res) != 1 || strings.Join(ran, ",") != "other" {
		t.Fatalf("Drain with the slot held elsewhere ran %v, want only [other]", ran)
	}
	if s := sizes(t, e.d, "default"); s.Limited != 3 || s.Ready != 0 || s.InFlight != 1 {
		t.Fatalf("sizes: limited %d, ready %d, in flight %d; want 3, 0, 1", s.Limited, s.Ready, s.InFlight)
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "email.receipt", Max: 1, Running: 1, Waiting: 3})

	if err := held.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	ran = nil
	res := drain(t, r, "default")
	if got := strings.Join(ran, ","); got != "o-1,o-2,o-3" {
		t.Fatalf("Drain after the slot came back ran %s, want o-1,o-2,o-3 in order", got)
	}
	for _, x := range res {
		if x.Settlement.Outcome != conveyor.OutcomeAcked || x.Job.Retries != 0 {
			t.Fatalf("job %s: %v after %d retries, want acked at its first attempt", x.Job.ID, x.Settlement.Outcome, x.Job.Retries)
		}
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "email.receipt", Max: 1})
	if s := sizes(t, e.d, "default"); s.Limited != 0 || s.Processed != 5 {
		t.Fatalf("sizes: limited %d, processed %d; want 0 and 5", s.Limited, s.Processed)
	}
}

// Process of a job whose limit is full leaves it waiting in the limit's
// line and says so; Drain runs it once the slot comes back.
func TestProcessWaitsForAFullLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.setLimit(t, "default", "", 1)
	e.enqueue(t, "k", nil, nil)
	held := e.open(t, "default", nil)
	ds, err := held.Fetch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	mux := worker.NewMux()
	mux.HandleFunc("k", func(ctx context.Context, job *conveyor.Job) error {
		runs++
		return nil
	})
	r := e.runner(t, mux, nil)
	if _, err := r.Process(ctx, "k", nil, nil); err == nil || !strings.Contains(err.Error(), "waits for a slot of the queue's concurrency limit") {
		t.Fatalf("Process under a full limit: %v, want the job reported waiting for a slot", err)
	}
	if runs != 0 {
		t.Fatalf("the handler ran %d times under a full limit", runs)
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "", Max: 1, Running: 1, Waiting: 1})
	if err := held.Release(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	// The waiting job was let in at the front, ahead of the released one.
	res := drain(t, r, "default")
	if len(res) != 2 || runs != 2 || res[0].Job.ID == ds[0].ID {
		t.Fatalf("Drain ran %d jobs (handler %d times), first %s; want 2, the waiting one first", len(res), runs, res[0].Job.ID)
	}
}

// A lease that expires by the fake clock gives its slots back: the job
// waiting for one is let in when the test advances the clock past the
// lease, not before.
func TestLimitSlotComesBackWithExpiredLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.setLimit(t, "default", "k", 1)
	e.enqueue(t, "k", Receipt{OrderID: "1"}, nil)
	e.enqueue(t, "k", Receipt{OrderID: "2"}, nil)
	dead := e.open(t, "default", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	ds, err := dead.Fetch(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch: %d deliveries, %v; want 1 under the limit", len(ds), err)
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "k", Max: 1, Running: 1, Waiting: 1})
	e.clock.Advance(time.Minute - time.Millisecond)
	e.wantLimits(t, "default", broker.Limit{Kind: "k", Max: 1, Running: 1, Waiting: 1})
	e.clock.Advance(time.Millisecond)
	// The expired job goes back to the queue; the waiting one, let in at
	// the front, comes first, and the first must take a slot again.
	e.wantLimits(t, "default", broker.Limit{Kind: "k", Max: 1})
	live := e.open(t, "default", nil)
	got, err := live.Fetch(ctx, 10)
	if err != nil || len(got) != 1 || got[0].ID == ds[0].ID {
		t.Fatalf("Fetch after the lease expired: %d deliveries, %v; want the waiting job alone", len(got), err)
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "k", Max: 1, Running: 1, Waiting: 1})
	if err := dead.Ack(ctx, ds[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack by the expired holder: %v, want ErrLeaseLost", err)
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "k", Max: 1, Running: 1, Waiting: 1})
}

// A worker.Pool with room for four runs one job at a time under a limit of
// one, and runs them all.
func TestPoolObeysLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setLimit(t, "default", "slow", 1)
	const jobs = 6
	for range jobs {
		e.enqueue(t, "slow", nil, nil)
	}
	var (
		mu            sync.Mutex
		running, most int
	)
	gate := make(chan struct{})
	mux := worker.NewMux()
	mux.HandleFunc("slow", func(ctx context.Context, job *conveyor.Job) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
		}
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	finished := make(chan conveyor.Outcome, jobs)
	observe := func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			job.OnFinish(func(s conveyor.Settlement) { finished <- s.Outcome })
			return next.ProcessJob(ctx, job)
		})
	}
	pool, err := worker.NewPool(e.d, mux, &worker.Config{Concurrency: 4, Middleware: []conveyor.Middleware{observe}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- pool.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("pool.Run: %v", err)
		}
	}()

	// One runs, the other five wait for its slot.
	waitFor(t, func() bool {
		ls, err := e.d.Limits(context.Background(), "default")
		return err == nil && len(ls) == 1 && ls[0].Running == 1 && ls[0].Waiting == jobs-1
	})
	for i := range jobs {
		select {
		case gate <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("job %d of %d did not start within 10s", i+1, jobs)
		}
		expect(t, finished, conveyor.OutcomeAcked)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("%d jobs ran at once under a limit of 1", most)
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "slow", Max: 1})
}

// waitFor fails t unless cond holds within 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
