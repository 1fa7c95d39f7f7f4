package worker_test

import (
	"context"
	"fmt"
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

// The crash test re-executes this test binary as a worker process, lets it
// take jobs, and SIGKILLs it while it holds them. Another pool must then run
// every job, the crashed ones counted as recoveries rather than attempts.
const (
	crashChildEnv  = "CONVEYOR_CRASH_CHILD"  // driver index, set in the child
	crashPrefixEnv = "CONVEYOR_CRASH_PREFIX" // key prefix shared with the child
)

func TestWorkerCrash(t *testing.T) { crashTest(t, crashChildEnv, crashChild, crashRun) }

func crashRun(t *testing.T, i int) {
	e := newEnv(t, i)
	ctx := context.Background()
	const n = 200
	reqs := make([]conveyor.Request, n)
	for j := range reqs {
		reqs[j] = conveyor.Request{Kind: "job", Args: []byte(strconv.Itoa(j))}
	}
	if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
		t.Fatal(err)
	}
	started := e.prefix + ":crash-started"
	child := proctest.StartTest(t, "TestWorkerCrash", crashChildEnv+"="+strconv.Itoa(i), crashPrefixEnv+"="+e.prefix)
	// Wait (blocking on Redis, no polling sleep) until the child holds jobs.
	deadline := time.Now().Add(30 * time.Second)
	for {
		held, err := e.rdb.SCard(ctx, started).Result()
		if err != nil {
			t.Fatal(err)
		}
		if held >= 10 {
			break
		}
		if time.Now().After(deadline) {
			child.Kill(t)
			t.Fatalf("child started only %d jobs", held)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = e.rdb.BLMove(wctx, started+":signal", started+":signal", "RIGHT", "RIGHT", time.Second).Err()
		cancel()
	}
	killWorker(t, child)
	crashed, err := e.rdb.SMembers(ctx, started).Result()
	if err != nil {
		t.Fatal(err)
	}
	e.rdb.Del(ctx, started, started+":signal")

	var (
		mu      sync.Mutex
		handled = map[string]int{}
		recov   = map[string]int{}
		done    = make(chan struct{})
	)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		mu.Lock()
		defer mu.Unlock()
		k := string(job.Payload)
		handled[k]++
		recov[k] = job.Recoveries
		if job.Retries != 0 {
			t.Errorf("job %s: Retries %d after a crash, want 0 (a crash is not an attempt)", k, job.Retries)
		}
		if len(handled) == n {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	})
	// The crashed child's leases are 500 ms, so its jobs come back soon;
	// this pool's are 2 s, so that a heartbeat slowed by a loaded machine
	// does not lose one of its own leases (a job run twice by this pool
	// would fail the count below for no fault of the crash recovery).
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 20, VisibilityTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop := drivertest.Background(t, p.Run)
	waitFor(t, "every job handled after the crash", 60*time.Second, done)
	stop()
	mu.Lock()
	defer mu.Unlock()
	for j := range n {
		if handled[strconv.Itoa(j)] != 1 {
			t.Fatalf("job %d handled %d times after the crash", j, handled[strconv.Itoa(j)])
		}
	}
	for _, k := range crashed {
		if recov[k] < 1 {
			t.Fatalf("job %s was held by the killed worker but has Recoveries %d", k, recov[k])
		}
	}
	t.Logf("%d jobs held by the killed worker were recovered", len(crashed))
	assertNoKeys(t, e)
}

// crashChild is the worker process of TestWorkerCrash: it takes jobs, notes
// each in a set and never finishes one, until it is killed.
func crashChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	prefix := os.Getenv(crashPrefixEnv)
	rdb := redistest.Client(t)
	d := durable[i].Must(t, rdb, prefix)
	started := prefix + ":crash-started"
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		if err := rdb.SAdd(ctx, started, string(job.Payload)).Err(); err != nil {
			return err
		}
		rdb.LPush(ctx, started+":signal", "x")
		<-ctx.Done() // held until the process dies
		return ctx.Err()
	})
	p, err := worker.NewPool(d, h, &worker.Config{Queue: "q", Concurrency: 10, VisibilityTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background())
	fmt.Fprintln(os.Stderr, "crash child: Run returned", err)
}
