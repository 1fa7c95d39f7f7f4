package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/worker"
)

// TestJobsDoNotWaitBehindLongJobs: a pool fetches a job ahead of its
// workers, then every worker runs long. Another pool with a free worker
// must get that job instead of it waiting in the first pool's room until
// a long job ends.
func TestJobsDoNotWaitBehindLongJobs(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			var shortID string
			for _, kind := range []string{"long", "long", "short"} {
				id, err := e.client.Enqueue(ctx, kind, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				shortID = id.ID
			}
			ins, err := conveyor.NewInspector(e.d, nil)
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			defer close(release)
			longStarted := make(chan struct{}, 2)
			var ranBy atomic.Value
			shortDone := make(chan struct{})
			handler := func(name string) conveyor.Handler {
				return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
					if job.Kind == "long" {
						longStarted <- struct{}{}
						select {
						case <-release:
						case <-ctx.Done():
						}
						return nil
					}
					if ranBy.CompareAndSwap(nil, name) {
						close(shortDone)
					} else {
						t.Errorf("the short job ran again, in %s", name)
					}
					return nil
				})
			}
			a, err := worker.NewPool(e.d, handler("busy"), &worker.Config{Queue: "q", Concurrency: 2, ShutdownGrace: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			drivertest.Background(t, a.Run)
			waitFor(t, "the first long job", 10*time.Second, longStarted)
			waitFor(t, "the second long job", 10*time.Second, longStarted)
			// The busy pool fetched the short job ahead of its workers.
			waitUntil(t, "the busy pool to fetch the short job", 10*time.Second, func() (bool, string) {
				j, err := ins.Job(ctx, "q", shortID)
				if err != nil {
					return false, err.Error()
				}
				return j.State == conveyor.JobInFlight, j.State.String()
			})
			select {
			case <-shortDone:
				t.Fatal("the short job ran in the busy pool: the test needs it fetched ahead, behind the long jobs")
			default:
			}

			b, err := worker.NewPool(e.d, handler("free"), &worker.Config{Queue: "q", Concurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			drivertest.Background(t, b.Run)
			waitFor(t, "the short job to run in the pool with a free worker", 10*time.Second, shortDone)
			if got := ranBy.Load(); got != "free" {
				t.Fatalf("the short job ran in the %v pool", got)
			}
		})
	}
}
