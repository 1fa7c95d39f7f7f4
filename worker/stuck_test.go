package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/worker"
)

// A handler that ignores its context and never returns does not keep its
// slot or its job: a visibility timeout after its JobTimeout the pool
// abandons it, another worker takes the slot (a second job runs on a pool
// of concurrency 1), and the job itself comes back once its lease, no
// longer extended, runs out, counted as a recovery. So it goes with
// JobTimeout set and with the default one (shortened for the test).
func TestStuckHandlerIsAbandoned(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		for _, byDefault := range []bool{false, true} {
			name := drv.Name + "/JobTimeout"
			if byDefault {
				name = drv.Name + "/default"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, i)
				ctx := context.Background()
				stuck := make(chan struct{})
				defer close(stuck) // the stuck handler returns when the test ends
				again, other := make(chan int, 1), make(chan struct{}, 1)
				h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
					switch {
					case job.ID == "other":
						other <- struct{}{}
					case job.Recoveries == 0:
						<-stuck // ignores ctx
					default:
						again <- job.Recoveries
					}
					return nil
				})
				cfg := &worker.Config{Queue: "q", Concurrency: 1, JobTimeout: 200 * time.Millisecond, VisibilityTimeout: 600 * time.Millisecond}
				if byDefault {
					cfg.JobTimeout = 0
				}
				p, err := worker.NewPool(e.d, h, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if byDefault {
					worker.SetDefaultTimeout(p, 200*time.Millisecond)
				}
				if _, err := e.client.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: "hangs"}); err != nil {
					t.Fatal(err)
				}
				drivertest.Background(t, p.Run)
				if _, err := e.client.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: "other"}); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "another job to run beside the stuck one (its slot taken over)", 15*time.Second, other)
				select {
				case r := <-again:
					if r < 1 {
						t.Fatalf("the stuck job came back with Recoveries %d, want >= 1", r)
					}
				case <-time.After(15 * time.Second):
					t.Fatal("the stuck job did not come back after its lease ran out")
				}
			})
		}
	}
}

// Without a timeout set, the default one ends a handler's context, cause
// context.DeadlineExceeded, without a deadline on the context, and the
// run is a failure like any other (retried).
func TestDefaultTimeoutEndsHandler(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			type run struct {
				attempt     int
				hasDeadline bool
				cause       error
			}
			runs := make(chan run, 4)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				_, dl := ctx.Deadline()
				if job.Retries > 0 {
					runs <- run{job.Retries, dl, nil}
					return nil
				}
				<-ctx.Done()
				runs <- run{job.Retries, dl, context.Cause(ctx)}
				return ctx.Err()
			})
			p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 1,
				VisibilityTimeout: 600 * time.Millisecond, Backoff: func(int) time.Duration { return 0 }})
			if err != nil {
				t.Fatal(err)
			}
			worker.SetDefaultTimeout(p, 300*time.Millisecond)
			if _, err := e.client.Enqueue(context.Background(), "k", nil, nil); err != nil {
				t.Fatal(err)
			}
			drivertest.Background(t, p.Run)
			for want := 0; want < 2; want++ {
				select {
				case r := <-runs:
					if r.attempt != want || r.hasDeadline {
						t.Fatalf("run %+v, want attempt %d and no deadline on the context", r, want)
					}
					if want == 0 && !errors.Is(r.cause, context.DeadlineExceeded) {
						t.Fatalf("first run ended with cause %v, want context.DeadlineExceeded", r.cause)
					}
				case <-time.After(15 * time.Second):
					t.Fatalf("no run %d", want)
				}
			}
		})
	}
}
