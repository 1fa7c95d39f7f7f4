package worker_test

import (
	"context"
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
// longer extended, runs out, counted as a recovery.
func TestStuckHandlerIsAbandoned(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
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
			p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 1,
				JobTimeout: 200 * time.Millisecond, VisibilityTimeout: 600 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
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
