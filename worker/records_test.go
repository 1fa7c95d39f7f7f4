package worker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// finished waits for the record of job id of queue q and returns it.
func finished(t *testing.T, ins *conveyor.Inspector, q, id string) *conveyor.JobRecord {
	t.Helper()
	var j *conveyor.JobInfo
	redistest.Eventually(t, "the record of "+id, func() bool {
		var err error
		j, err = ins.Job(context.Background(), q, id, conveyor.JobFinished)
		if err != nil && !errors.Is(err, conveyor.ErrJobNotFound) {
			t.Fatal(err)
		}
		return j != nil
	})
	if j.State != conveyor.JobFinished || j.Record == nil {
		t.Fatalf("Job(%s) = state %v, record %v", id, j.State, j.Record)
	}
	return j.Record
}

// TestRecords: a pool with Records keeps a record of every job it
// finishes: acked with a result, acked on its third attempt after two
// failures, discarded with its error, cancelled while it ran; Inspector.Job
// finds each, with its outcome, attempt, times and worker.
func TestRecords(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			ins, err := conveyor.NewInspector(e.d, nil)
			if err != nil {
				t.Fatal(err)
			}
			mux := worker.NewMux()
			mux.HandleFunc("ok", func(ctx context.Context, job *conveyor.Job) error {
				return job.SetResult([]byte(`{"invoice":"INV-1"}`))
			})
			mux.HandleFunc("flaky", func(ctx context.Context, job *conveyor.Job) error {
				if job.Attempt() < 3 {
					return errors.New("not yet")
				}
				return nil
			})
			mux.HandleFunc("bad", func(ctx context.Context, job *conveyor.Job) error { return errors.New("bad input") })
			running := make(chan struct{})
			var once sync.Once
			mux.HandleFunc("block", func(ctx context.Context, job *conveyor.Job) error {
				once.Do(func() { close(running) })
				<-ctx.Done()
				return context.Cause(ctx)
			})
			before := time.Now()
			ok := enqueue(t, e, "ok", nil)
			flaky := enqueue(t, e, "flaky", nil)
			bad := enqueue(t, e, "bad", &conveyor.EnqueueOptions{MaxAttempts: 1})
			block := enqueue(t, e, "block", nil)
			runPool(t, e.d, mux, &worker.Config{Queue: "q", Concurrency: 4, Records: time.Hour,
				Backoff: func(int) time.Duration { return time.Millisecond }})
			waitFor(t, "the blocking job to start", 10*time.Second, running)
			if st, err := e.client.CancelJob(ctx, "q", block); err != nil || st != conveyor.JobInFlight {
				t.Fatalf("CancelJob = %v, %v", st, err)
			}

			r := finished(t, ins, "q", ok)
			if r.Outcome != "acked" || r.Attempt != 1 || string(r.Result) != `{"invoice":"INV-1"}` || r.Kind != "ok" || r.Queue != "q" || r.Worker == "" {
				t.Errorf("record of ok = %+v", r)
			}
			if r.EnqueuedAt.Before(before.Add(-time.Second)) || r.StartedAt.Before(r.EnqueuedAt) ||
				r.FinishedAt.Before(r.StartedAt.Add(-time.Second)) || r.ExpiresAt.Sub(r.FinishedAt) != time.Hour {
				t.Errorf("record of ok: enqueued %v, started %v, finished %v, expires %v", r.EnqueuedAt, r.StartedAt, r.FinishedAt, r.ExpiresAt)
			}
			if r := finished(t, ins, "q", flaky); r.Outcome != "acked" || r.Attempt != 3 {
				t.Errorf("record of flaky = %+v, want acked on attempt 3", r)
			}
			if r := finished(t, ins, "q", bad); r.Outcome != "discarded" || !strings.Contains(r.Error, "bad input") {
				t.Errorf("record of bad = %+v, want discarded with its error", r)
			}
			if r := finished(t, ins, "q", block); r.Outcome != "canceled" || r.Error == "" {
				t.Errorf("record of block = %+v, want canceled with the cause", r)
			}
			// The default search finds where a job is now before its
			// record: the discarded job in the discard queue, the acked one
			// by its record.
			if j, err := ins.Job(ctx, "q", bad); err != nil || j.State != conveyor.JobDiscarded {
				t.Errorf("Job(bad) = %+v, %v; want its discard record first", j, err)
			}
			if j, err := ins.Job(ctx, "q", ok); err != nil || j.State != conveyor.JobFinished {
				t.Errorf("Job(ok) = %+v, %v; want its record", j, err)
			}
			page, err := ins.Jobs(ctx, "q", conveyor.JobFinished, nil)
			if err != nil || page.Total != 4 || len(page.Jobs) != 4 {
				t.Fatalf("Jobs(finished) = %+v, %v; want 4", page, err)
			}
		})
	}
}

// TestRecordsOff: a pool without Records writes no record and touches no
// record key (MONITOR sees every command, those inside scripts included);
// a job that asks for its own record gets one.
func TestRecordsOff(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			mon := redistest.StartMonitor(t, e.rdb)
			ins, err := conveyor.NewInspector(e.d, nil)
			if err != nil {
				t.Fatal(err)
			}
			mux := worker.NewMux()
			mux.HandleFunc("ok", func(ctx context.Context, job *conveyor.Job) error { return job.SetResult([]byte("r")) })
			mux.HandleFunc("bad", func(ctx context.Context, job *conveyor.Job) error { return errors.New("bad") })
			var ids []string
			for range 20 {
				ids = append(ids, enqueue(t, e, "ok", nil))
			}
			ids = append(ids, enqueue(t, e, "bad", &conveyor.EnqueueOptions{MaxAttempts: 1}))
			runPool(t, e.d, mux, &worker.Config{Queue: "q"})
			redistest.Eventually(t, "the jobs to finish", func() bool {
				s, err := ins.Queue(ctx, "q")
				return err == nil && s.Processed == 20 && s.Discarded == 1
			})
			// No command wrote to (or read) a record key. (Script calls
			// name the keys they may touch; MONITOR shows the commands they
			// run apart.)
			recordKey := e.prefix + ":{q}:done"
			lines := mon.Lines(t)
			for _, l := range lines {
				if strings.HasPrefix(redistest.Key(l), recordKey) {
					t.Fatalf("a record key was touched while no job asked for a record: %s", l)
				}
			}
			if len(lines) < 21 {
				t.Fatalf("MONITOR showed %d commands for 21 jobs", len(lines))
			}
			if ks := redistest.AllKeys(t, e.rdb, e.prefix); slices.ContainsFunc(ks, func(k string) bool { return strings.HasPrefix(k, recordKey) }) {
				t.Fatalf("record keys written while no job asked for a record: %q", ks)
			}
			for _, id := range ids {
				if j, err := ins.Job(ctx, "q", id, conveyor.JobFinished); !errors.Is(err, conveyor.ErrJobNotFound) {
					t.Fatalf("Job(%s, finished) = %+v, %v; want not found", id, j, err)
				}
			}
			asks := enqueue(t, e, "ok", &conveyor.EnqueueOptions{Record: time.Minute})
			if r := finished(t, ins, "q", asks); r.Outcome != "acked" || string(r.Result) != "r" || r.ExpiresAt.Sub(r.FinishedAt) != time.Minute {
				t.Fatalf("record of the job that asked = %+v", r)
			}
		})
	}
}

func enqueue(t *testing.T, e env, kind string, o *conveyor.EnqueueOptions) string {
	t.Helper()
	j, err := e.client.Enqueue(context.Background(), kind, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	return j.ID
}
