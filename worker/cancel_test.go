package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/cancels"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The cancel test runs a pool in a child process (this test binary run
// again) and cancels its jobs from the test process, through Redis only.
const (
	cancelChildEnv   = "CONVEYOR_CANCEL_CHILD"   // driver index, set in the child
	cancelPrefixEnv  = "CONVEYOR_CANCEL_PREFIX"  // the queue's key prefix
	cancelWitnessEnv = "CONVEYOR_CANCEL_WITNESS" // prefix of the lists child and test talk through
	// cancelLease is long, so that its heartbeat (a third of it) comes too
	// late to pass for the published notice this test measures.
	cancelLease = 30 * time.Second
)

// cancelKeys are the lists the child and the test talk through.
type cancelKeys string

func (c cancelKeys) started() string { return string(c) + ":started" } // IDs of the jobs the handler started
func (c cancelKeys) ended() string   { return string(c) + ":ended" }   // "<id>|<cause is ErrJobCanceled>|<unix ns the context ended>|<cause>"
func (c cancelKeys) outcome() string { return string(c) + ":outcome" } // "<id> <outcome>" from OnFinish

// TestCancelJobAcrossProcesses: a job running in another process, cancelled
// by ID, sees ErrJobCanceled as its context's cause within a second (the
// heartbeat is 10s away), ends canceled although its handler returned an
// error, is not retried and is gone; a delayed and a ready job are
// cancelled and never run; a job that finished cannot be cancelled (0).
func TestCancelJobAcrossProcesses(t *testing.T) {
	crashTest(t, cancelChildEnv, cancelChild, cancelRun)
}

func cancelRun(t *testing.T, i int) {
	e := newEnv(t, i)
	w := cancelKeys(redistest.Prefix(t))
	ctx := context.Background()
	ins, err := conveyor.NewInspector(e.d, nil)
	if err != nil {
		t.Fatal(err)
	}
	child := proctest.StartTest(t, "TestCancelJobAcrossProcesses",
		cancelChildEnv+"="+strconv.Itoa(i), cancelPrefixEnv+"="+e.prefix, cancelWitnessEnv+"="+string(w))

	// Running.
	run, err := e.client.Enqueue(ctx, "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := blpop(t, e, w.started(), 30*time.Second, "the child to start the job"); got != run.ID {
		t.Fatalf("child started %s, want %s", got, run.ID)
	}
	asked := time.Now()
	st, err := e.client.CancelJob(ctx, "", run.ID)
	if err != nil || st != conveyor.JobInFlight {
		t.Fatalf("CancelJob of the running job = %v, %v; want in_flight", st, err)
	}
	parts := strings.SplitN(blpop(t, e, w.ended(), 30*time.Second, "the handler's context to end"), "|", 4)
	if len(parts) != 4 || parts[0] != run.ID {
		t.Fatalf("child report %q", parts)
	}
	if parts[1] != "true" {
		t.Fatalf("the handler's context ended with %q, want ErrJobCanceled", parts[3])
	}
	ns, _ := strconv.ParseInt(parts[2], 10, 64)
	took := time.Unix(0, ns).Sub(asked)
	// The heartbeat would have told it 10s after the job started at the
	// soonest: under that, the published notice did.
	if took > 5*time.Second {
		t.Fatalf("the handler saw the cancel %v after CancelJob was called", took)
	}
	if got := blpop(t, e, w.outcome(), 30*time.Second, "the job's outcome"); got != run.ID+" canceled" {
		t.Fatalf("outcome %q, want %q", got, run.ID+" canceled")
	}
	if _, err := ins.Job(ctx, "q", run.ID); !errors.Is(err, conveyor.ErrJobNotFound) {
		t.Fatalf("the cancelled job after its end: %v, want ErrJobNotFound (not retried, not discarded)", err)
	}
	if st, err := e.client.CancelJob(ctx, "q", run.ID); err != nil || st != 0 {
		t.Fatalf("CancelJob of the ended job = %v, %v; want 0", st, err)
	}

	// Delayed.
	later, err := e.client.Enqueue(ctx, "quick", nil, &conveyor.EnqueueOptions{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ins.CancelJob(ctx, "q", later.ID); err != nil || st != conveyor.JobDelayed {
		t.Fatalf("CancelJob of the delayed job = %v, %v; want delayed", st, err)
	}

	// Waiting: enqueued while the pool's one worker runs a job, so that it
	// is ready, or fetched ahead and waiting in the pool to start. Either
	// way it never runs, also once the worker is free.
	busy, err := e.client.Enqueue(ctx, "block", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := blpop(t, e, w.started(), 30*time.Second, "the child to start the busy job"); got != busy.ID {
		t.Fatalf("child started %s, want %s", got, busy.ID)
	}
	waiting, err := e.client.Enqueue(ctx, "quick", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e.client.CancelJob(ctx, "q", waiting.ID); err != nil || (st != conveyor.JobReady && st != conveyor.JobInFlight) {
		t.Fatalf("CancelJob of the waiting job = %v, %v; want ready or in_flight", st, err)
	}
	if st, err := e.client.CancelJob(ctx, "q", busy.ID); err != nil || st != conveyor.JobInFlight {
		t.Fatalf("CancelJob of the busy job = %v, %v; want in_flight", st, err)
	}
	if r := blpop(t, e, w.ended(), 30*time.Second, "the busy job's end"); !strings.HasPrefix(r, busy.ID+"|true|") {
		t.Fatalf("the busy job ended with %q, want its context cancelled with ErrJobCanceled", r)
	}
	if got := blpop(t, e, w.outcome(), 30*time.Second, "the busy job's outcome"); got != busy.ID+" canceled" {
		t.Fatalf("outcome %q, want %q", got, busy.ID+" canceled")
	}

	// A job after them runs; the cancelled ones never did.
	last, err := e.client.Enqueue(ctx, "quick", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := blpop(t, e, w.started(), 30*time.Second, "the child to start the last job"); got != last.ID {
		t.Fatalf("child started %s, want %s (a cancelled job ran)", got, last.ID)
	}
	if got := blpop(t, e, w.outcome(), 30*time.Second, "the last job's outcome"); got != last.ID+" acked" {
		t.Fatalf("outcome %q, want %q", got, last.ID+" acked")
	}
	if st, err := e.client.CancelJob(ctx, "q", last.ID); err != nil || st != 0 {
		t.Fatalf("CancelJob of a finished job = %v, %v; want 0", st, err)
	}
	if err := child.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("child did not stop cleanly: %v", err)
	}
	if n, err := e.rdb.LLen(ctx, w.started()).Result(); err != nil || n != 0 {
		t.Fatalf("%d more jobs started after the last: %v", n, err)
	}
	// The running job's mark outlives it (it expires on its own); nothing
	// else of the queue is left.
	marks := cancels.Marks(e.prefix, "q")
	if ks := redistest.Keys(t, e.rdb, e.prefix); len(ks) != 1 || ks[0] != marks {
		t.Fatalf("keys left: %v, want only %s", ks, marks)
	}
	if err := e.rdb.Del(ctx, marks).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: the handler saw the cancel %v after CancelJob was called", durable[i].Name, took.Round(time.Microsecond))
}

// cancelChild is the worker process of TestCancelJobAcrossProcesses. Kind
// "block" waits for its context to end and reports how; "quick" returns at
// once. Both say when they start and how they ended.
func cancelChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	w := cancelKeys(os.Getenv(cancelWitnessEnv))
	rdb := redistest.Client(t)
	d := durable[i].Must(t, rdb, os.Getenv(cancelPrefixEnv))
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		bg, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		job.OnFinish(func(s conveyor.Settlement) { // after the handler returned: bg has ended
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rdb.RPush(ctx, w.outcome(), job.ID+" "+s.Outcome.String())
		})
		if err := rdb.RPush(bg, w.started(), job.ID).Err(); err != nil {
			return err
		}
		if job.Kind != "block" {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-bg.Done():
		}
		ended := time.Now()
		cause := context.Cause(ctx)
		report := fmt.Sprintf("%s|%t|%d|%v", job.ID, errors.Is(cause, conveyor.ErrJobCanceled), ended.UnixNano(), cause)
		if err := rdb.RPush(bg, w.ended(), report).Err(); err != nil {
			return err
		}
		return ctx.Err() // an error: without the cancel, a retry
	})
	runChild(t, d, h, &worker.Config{
		Queue: "q", Concurrency: 1, VisibilityTimeout: cancelLease,
		Logger: childLog(slog.LevelWarn),
	})
}
