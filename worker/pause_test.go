package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/worker"
)

// TestPauseUnderLoad: a queue paused while two pools work through a backlog
// of jobs that run longer than a second starts no job more than 1s after
// Pause returned, though its pools held jobs fetched ahead (they would
// start once a running job ends); it still takes enqueues and promotes
// timers; Resume drains it.
func TestPauseUnderLoad(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			const backlog, jobTime = 40, 1200 * time.Millisecond
			reqs := make([]conveyor.Request, backlog)
			for j := range reqs {
				reqs[j] = conveyor.Request{Kind: "work"}
			}
			if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
				t.Fatal(err)
			}
			ins, err := conveyor.NewInspector(e.d, nil)
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu       sync.Mutex
				ran      = map[string]int{}
				loaded   = make(chan struct{})
				pausedAt atomic.Int64 // unix ns; 0 while not paused
				drained  = make(chan struct{})
				total    = backlog + 2 // the backlog, a job enqueued and a timer set while paused
			)
			late := make(chan string, total)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				now := time.Now()
				if at := pausedAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) > time.Second {
					late <- job.ID
				}
				mu.Lock()
				ran[job.ID]++
				n := len(ran)
				mu.Unlock()
				if n == 8 { // every worker of both pools runs one
					close(loaded)
				}
				if n == total {
					close(drained)
				}
				select { // a job takes a while: the pools hold jobs fetched ahead
				case <-time.After(jobTime):
				case <-ctx.Done():
				}
				return nil
			})
			for range 2 {
				p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 4})
				if err != nil {
					t.Fatal(err)
				}
				drivertest.Background(t, p.Run)
			}
			waitFor(t, "the pools to get going", 30*time.Second, loaded)

			// Both pools hold jobs fetched ahead of their workers.
			waitUntil(t, "the pools to fetch ahead", 10*time.Second, func() (bool, string) {
				q, err := ins.Queue(ctx, "q")
				if err != nil {
					t.Fatal(err)
				}
				return q.InFlight >= 12, fmt.Sprintf("%d in flight", q.InFlight)
			})
			if err := ins.Pause(ctx, "q"); err != nil {
				t.Fatal(err)
			}
			pausedAt.Store(time.Now().UnixNano())
			if paused, err := ins.Paused(ctx, "q"); err != nil || !paused {
				t.Fatalf("Paused after Pause: %v, %v", paused, err)
			}
			// While paused: an enqueue is stored, a timer is promoted.
			if _, err := e.client.Enqueue(ctx, "work", nil, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := e.client.Enqueue(ctx, "work", nil, &conveyor.EnqueueOptions{Delay: 100 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the timer promoted while paused", 10*time.Second, func() (bool, string) {
				q, err := ins.Queue(ctx, "q")
				if err != nil {
					t.Fatal(err)
				}
				return q.Delayed == 0, "still delayed"
			})
			// No job may start later than 1s after the pause: wait for one
			// to, until well past the time the jobs fetched ahead would
			// have started.
			select {
			case id := <-late:
				t.Fatalf("job %s started over 1s after the pause", id)
			case <-time.After(2 * jobTime):
			}
			mu.Lock()
			before := len(ran)
			mu.Unlock()
			if before >= total {
				t.Fatalf("all %d jobs ran though the queue was paused", before)
			}
			q, err := ins.Queue(ctx, "q")
			if err != nil {
				t.Fatal(err)
			}
			if q.Ready == 0 {
				t.Fatalf("nothing waits in the paused queue: %+v", q)
			}

			if err := ins.Resume(ctx, "q"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the queue to drain after Resume", 60*time.Second, drained)
			mu.Lock()
			defer mu.Unlock()
			for id, n := range ran {
				if n != 1 {
					t.Fatalf("job %s ran %d times", id, n)
				}
			}
		})
	}
}
