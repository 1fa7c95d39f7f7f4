package conveyortest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/worker"
)

// Cancelling a running job cancels its handler's context in the pool that
// runs it, with cause conveyor.ErrJobCanceled, and the job ends canceled,
// not retried; a job waiting for a concurrency limit's slot is cancelled
// as a ready one and never runs.
func TestCancelJobInPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.setLimit(t, "default", "k", 1)
	started := make(chan string, 2)
	cause := make(chan error, 1)
	mux := worker.NewMux()
	mux.HandleFunc("k", func(ctx context.Context, job *conveyor.Job) error {
		started <- job.ID
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	finished := make(chan conveyor.Outcome, 2)
	observe := func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			job.OnFinish(func(s conveyor.Settlement) { finished <- s.Outcome })
			return next.ProcessJob(ctx, job)
		})
	}
	pool, err := worker.NewPool(e.d, mux, &worker.Config{Concurrency: 2, Middleware: []conveyor.Middleware{observe}})
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

	run, err := e.client.Enqueue(ctx, "k", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait, err := e.client.Enqueue(ctx, "k", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, started, run.ID)
	waitFor(t, func() bool { return sizes(t, e.d, "default").Limited == 1 })
	if st, err := e.client.CancelJob(ctx, "default", wait.ID); err != nil || st != conveyor.JobReady {
		t.Fatalf("CancelJob of the job waiting for a slot = %v, %v; want JobReady", st, err)
	}
	if st, err := e.client.CancelJob(ctx, "default", run.ID); err != nil || st != conveyor.JobInFlight {
		t.Fatalf("CancelJob of the running job = %v, %v; want JobInFlight", st, err)
	}
	expect(t, cause, conveyor.ErrJobCanceled)
	expect(t, finished, conveyor.OutcomeCanceled)
	waitFor(t, func() bool { s := sizes(t, e.d, "default"); return s.InFlight == 0 && s.Ready == 0 && s.Limited == 0 })
	if len(started) != 0 {
		t.Fatalf("the cancelled waiting job ran: %s", <-started)
	}
	e.wantLimits(t, "default", broker.Limit{Kind: "k", Max: 1})
}
