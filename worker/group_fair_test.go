package worker_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/worker"
)

// TestGroupFairness runs one group with 50,000 jobs and a limit of 10
// (the pool's concurrency) and 100 groups of one job each, enqueued after
// it, through a pool of concurrency 10: the big group holds 10 places in
// the queue, so each small group's job starts in the first round of turns
// (10 jobs of the big group, then one of each of the others: 110 jobs),
// or, as the pool may start a job of the big group let in meanwhile, the
// second.
func TestGroupFairness(t *testing.T) {
	t.Parallel()
	const (
		big    = 50_000
		small  = 100
		conc   = 10
		rounds = 2 // rounds of turns within which every small group must start
	)
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			if !e.d.Capabilities().Groups {
				t.Skipf("driver %s has no FIFO groups", drv.Name)
			}
			ctx := context.Background()
			for b := 0; b < big; b += 1000 {
				reqs := make([]conveyor.Request, 1000)
				for j := range reqs {
					reqs[j] = conveyor.Request{Kind: "work", Args: []byte("big"), Opts: &conveyor.EnqueueOptions{Group: "big", GroupLimit: conc}}
				}
				if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
					t.Fatal(err)
				}
			}
			var reqs []conveyor.Request
			for g := range small {
				name := "small-" + strconv.Itoa(g)
				reqs = append(reqs, conveyor.Request{Kind: "work", Args: []byte(name), Opts: &conveyor.EnqueueOptions{Group: name}})
			}
			if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
				t.Fatal(err)
			}

			var (
				mu      sync.Mutex
				started int
				last    int // the start number of the last small group's job
				seen    = map[string]bool{}
				done    = make(chan struct{})
			)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				mu.Lock()
				defer mu.Unlock()
				started++
				if g := string(job.Payload); g != "big" && !seen[g] {
					seen[g] = true
					last = started
					if len(seen) == small {
						close(done)
					}
				}
				return nil
			})
			p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: conc})
			if err != nil {
				t.Fatal(err)
			}
			stop := drivertest.Background(t, p.Run)
			waitFor(t, "every small group's job to start", 60*time.Second, done)
			stop()
			mu.Lock()
			defer mu.Unlock()
			round := conc + small
			if last > rounds*round {
				t.Fatalf("the last small group's job was job %d to start, want within the first %d (%d rounds of %d turns)", last, rounds*round, rounds, round)
			}
			t.Logf("%s: every one of %d one-job groups started among the first %d jobs (a round of turns is %d: %d of the big group's 50,000, then one of each)",
				drv.Name, small, last, round, conc)
		})
	}
}
