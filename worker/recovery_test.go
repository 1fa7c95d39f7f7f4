package worker_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The recovery test SIGKILLs a worker process (this test binary
// re-executed) while it runs 100 jobs of 1 s; a pool of concurrency 100 must
// then finish all of them within the visibility timeout plus 3 s: crash
// victims are recovered in batches, not one at a time.
const (
	recChildEnv  = "CONVEYOR_RECOVERY_CHILD"  // driver index, set in the child
	recPrefixEnv = "CONVEYOR_RECOVERY_PREFIX" // key prefix shared with the child
	recJobs      = 100
	recLease     = 2 * time.Second
	recJobTime   = time.Second
)

func TestRecoveryAtFullSpeed(t *testing.T) { crashTest(t, recChildEnv, recoveryChild, recoveryRun) }

func recoveryRun(t *testing.T, i int) {
	e := newEnv(t, i)
	ctx := context.Background()
	reqs := make([]conveyor.Request, recJobs)
	for j := range reqs {
		reqs[j] = conveyor.Request{Kind: "slow", Args: []byte(strconv.Itoa(j))}
	}
	if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
		t.Fatal(err)
	}
	started := e.prefix + ":rec-started"
	child := proctest.StartTest(t, "TestRecoveryAtFullSpeed", recChildEnv+"="+strconv.Itoa(i), recPrefixEnv+"="+e.prefix)
	waitUntil(t, "the child to run every job", 30*time.Second, func() (bool, string) {
		n, err := e.rdb.SCard(ctx, started).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == recJobs, strconv.FormatInt(n, 10) + " started"
	})
	killWorker(t, child)
	killed := time.Now()

	var (
		mu       sync.Mutex
		finished = map[string]int{}
		done     = make(chan struct{})
		last     time.Time
	)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		select {
		case <-time.After(recJobTime):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		if job.Recoveries != 1 || job.Retries != 0 {
			t.Errorf("job %s: Recoveries %d, Retries %d; want 1 and 0", job.Payload, job.Recoveries, job.Retries)
		}
		finished[string(job.Payload)]++
		if len(finished) == recJobs {
			last = time.Now()
			close(done)
		}
		return nil
	})
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: recJobs, VisibilityTimeout: recLease})
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Background(t, p.Run)
	waitFor(t, "every job of the killed worker to finish", 60*time.Second, done)
	mu.Lock()
	defer mu.Unlock()
	if took := last.Sub(killed); took > recLease+3*time.Second {
		t.Fatalf("the %d jobs of the killed worker finished %v after the kill, want within the lease (%v) + 3s", recJobs, took, recLease)
	}
	for j := range recJobs {
		if n := finished[strconv.Itoa(j)]; n != 1 {
			t.Fatalf("job %d finished %d times", j, n)
		}
	}
}

// recoveryChild is the worker process of TestRecoveryAtFullSpeed: it runs
// every job, notes it, and never finishes one, until it is killed.
func recoveryChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	prefix := os.Getenv(recPrefixEnv)
	rdb := redistest.Client(t)
	d := durable[i].Must(t, rdb, prefix)
	started := prefix + ":rec-started"
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		if err := rdb.SAdd(ctx, started, string(job.Payload)).Err(); err != nil {
			return err
		}
		<-ctx.Done() // held until the process dies
		return ctx.Err()
	})
	p, err := worker.NewPool(d, h, &worker.Config{Queue: "q", Concurrency: recJobs, VisibilityTimeout: recLease})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Run(context.Background())
}
