package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The fencing test pauses a worker process (SIGSTOP) while its handler runs
// a job, long enough for the lease to run out and another pool to run and ack
// the job; then resumes it (SIGCONT). The paused worker must learn that it
// lost the lease, from its handler's context and from its ack, and the job
// must have run to completion once, elsewhere.
const (
	fenceChildEnv   = "CONVEYOR_FENCE_CHILD"   // driver index, set in the child
	fencePrefixEnv  = "CONVEYOR_FENCE_PREFIX"  // the queue's key prefix
	fenceWitnessEnv = "CONVEYOR_FENCE_WITNESS" // prefix of the keys child and test talk through
	fenceLease      = time.Second
)

// fenceKeys are the lists the child and the test talk through.
type fenceKeys string

func (f fenceKeys) started() string { return string(f) + ":started" } // the child's handler pushes the job ID
func (f fenceKeys) release() string { return string(f) + ":release" } // the test pushes to let the handler go on
func (f fenceKeys) result() string  { return string(f) + ":result" }  // the child's handler pushes what it saw

func TestFencingSIGSTOP(t *testing.T) { crashTest(t, fenceChildEnv, fenceChild, fenceRun) }

func fenceRun(t *testing.T, i int) {
	e := newEnv(t, i)
	f := fenceKeys(redistest.Prefix(t))
	ctx := context.Background()
	m, err := e.client.Enqueue(ctx, "fence", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	child := proctest.StartTest(t, "TestFencingSIGSTOP",
		fenceChildEnv+"="+strconv.Itoa(i), fencePrefixEnv+"="+e.prefix, fenceWitnessEnv+"="+string(f))
	got := blpop(t, e, f.started(), 30*time.Second, "the child's handler to start the job")
	if got != m.ID {
		t.Fatalf("child started job %s, want %s", got, m.ID)
	}
	if err := child.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// Resumed at the end however the test ends, so that cleanup can kill it.
	t.Cleanup(func() { _ = child.Cmd.Process.Signal(syscall.SIGCONT) })

	// Another worker: a pool in this process. It gets the job once the
	// paused worker's lease runs out.
	type run struct {
		id                  string
		attempt, recoveries int
	}
	var (
		mu   sync.Mutex
		runs []run
		ran  = make(chan struct{})
	)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, run{job.ID, job.Retries, job.Recoveries})
		if len(runs) == 1 {
			close(ran)
		}
		return nil
	})
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 2, VisibilityTimeout: fenceLease})
	if err != nil {
		t.Fatal(err)
	}
	stopPool := drivertest.Background(t, p.Run)
	waitFor(t, "the other worker to run the job", 30*time.Second, ran)
	takenAfter := time.Since(stopped)
	// And to ack it: then Redis holds nothing of the job.
	drv := durable[i].Name
	waitUntil(t, "the other worker's ack", 10*time.Second, func() (bool, string) {
		left := inFlight(t, e, drv, "q")
		return left == "", left
	})

	if err := child.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	pausedFor := time.Since(stopped)
	if err := e.rdb.RPush(ctx, f.release(), "go").Err(); err != nil {
		t.Fatal(err)
	}
	res := blpop(t, e, f.result(), 30*time.Second, "the resumed child's report")
	// "<ack is ErrLeaseLost>|<ack error>|<context cause is ErrLeaseLost>|<context cause>"
	parts := strings.SplitN(res, "|", 4)
	if len(parts) != 4 {
		t.Fatalf("child report %q", res)
	}
	if parts[2] != "true" {
		t.Errorf("the resumed child's handler context ended with %q, want ErrLeaseLost", parts[3])
	}
	if parts[0] != "true" {
		t.Errorf("the resumed child's Job.Ack returned %q, want ErrLeaseLost", parts[1])
	}
	if err := child.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("child did not stop cleanly: %v", err)
	}
	stopPool()

	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 || runs[0].id != m.ID || runs[0].attempt != 0 || runs[0].recoveries != 1 {
		t.Fatalf("the other worker ran %+v, want job %s once with Retries 0, Recoveries 1", runs, m.ID)
	}
	// Nothing of the job is left to run a third time.
	assertNoKeys(t, e)
	t.Logf("%s: job taken over %v after the pause; child resumed after %v; its ack: %s; its context: %s",
		drv, takenAfter.Round(time.Millisecond), pausedFor.Round(time.Millisecond), parts[1], parts[3])
}

// fenceChild is the worker process of TestFencingSIGSTOP. Its handler says
// it started, waits until the test releases it, waits for its context to
// end (the heartbeat finds the lease lost), then acks and reports both.
func fenceChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	f := fenceKeys(os.Getenv(fenceWitnessEnv))
	rdb := redistest.Client(t)
	d := durable[i].Must(t, rdb, os.Getenv(fencePrefixEnv))
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		bg, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := rdb.RPush(bg, f.started(), job.ID).Err(); err != nil {
			return err
		}
		// Paused somewhere in here.
		if err := rdb.BLPop(bg, 60*time.Second, f.release()).Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		cause := context.Cause(ctx)
		ackCtx, cancelAck := context.WithTimeout(context.Background(), 10*time.Second)
		ackErr := job.Ack(ackCtx)
		cancelAck()
		report := fmt.Sprintf("%t|%v|%t|%v", errors.Is(ackErr, conveyor.ErrLeaseLost), ackErr, errors.Is(cause, conveyor.ErrLeaseLost), cause)
		return rdb.RPush(bg, f.result(), report).Err()
	})
	runChild(t, d, h, &worker.Config{
		Queue: "q", Concurrency: 1, VisibilityTimeout: fenceLease,
		Logger: childLog(slog.LevelWarn),
	})
}

// blpop waits for an element of a Redis list for up to timeout.
func blpop(t *testing.T, e env, key string, timeout time.Duration, what string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	kv, err := e.rdb.BLPop(ctx, timeout, key).Result()
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return kv[1]
}
