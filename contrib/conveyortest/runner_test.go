package conveyortest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

func TestProcessRunsTheJobThroughTheMux(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "other", nil, nil) // ahead in the queue: Process must not run it
	var got []string
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		got = append(got, r.OrderID)
		return nil
	})
	res, err := e.runner(t, mux, nil).Process(context.Background(), "email.receipt", Receipt{OrderID: "o-1"}, nil)
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	if res.Err != nil || res.Settlement.Outcome != conveyor.OutcomeAcked {
		t.Fatalf("result: err %v, settlement %+v; want nil, acked", res.Err, res.Settlement)
	}
	if !slices.Equal(got, []string{"o-1"}) || res.Job.Kind != "email.receipt" {
		t.Fatalf("handler saw %q (job kind %q), want [o-1] of email.receipt", got, res.Job.Kind)
	}
	if s := sizes(t, e.d, "default"); s.Processed != 1 || s.Ready != 1 || s.InFlight != 0 {
		t.Fatalf("queue after Process: processed %d, ready %d, in flight %d; want 1, 1 (the other job), 0", s.Processed, s.Ready, s.InFlight)
	}
}

func TestProcessRefusesDelayedJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.runner(t, worker.NewMux(), nil).Process(context.Background(), "k", nil, &conveyor.EnqueueOptions{Delay: time.Minute})
	if err == nil {
		t.Fatal("Process of a delayed job ran it")
	}
	if n := len(conveyortest.Enqueued[[]byte](t, e.d, "default")); n != 0 {
		t.Fatalf("the refused job was enqueued (%d jobs wait)", n)
	}
}

// A retry waits for its backoff by the fake clock, to the millisecond.
func TestRetryComesDueWhenClockAdvances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := 0
	mux := worker.NewMux()
	mux.HandleFunc("flaky", func(ctx context.Context, job *conveyor.Job) error {
		runs++
		if runs == 1 {
			return errors.New("downstream down")
		}
		return nil
	})
	r := e.runner(t, mux, &conveyortest.RunnerConfig{Retry: &retry.Rules{Policy: retry.Constant(10 * time.Second)}})
	e.enqueue(t, "flaky", nil, nil)

	res := drain(t, r, "default")
	if !slices.Equal(outcomes(res), []conveyor.Outcome{conveyor.OutcomeRetried}) {
		t.Fatalf("first drain: %v, want [retried]", outcomes(res))
	}
	if want := conveyortest.DefaultStart.Add(10 * time.Second); !res[0].Settlement.At.Equal(want) {
		t.Fatalf("retry at %v, want %v", res[0].Settlement.At, want)
	}
	if res := drain(t, r, "default"); len(res) != 0 {
		t.Fatalf("the retry ran before its time: %v", outcomes(res))
	}
	e.clock.Advance(10*time.Second - time.Millisecond)
	if res := drain(t, r, "default"); len(res) != 0 {
		t.Fatalf("the retry ran 1ms early: %v", outcomes(res))
	}
	e.clock.Advance(time.Millisecond)
	res = drain(t, r, "default")
	if !slices.Equal(outcomes(res), []conveyor.Outcome{conveyor.OutcomeAcked}) || res[0].Job.Attempt() != 2 {
		t.Fatalf("after the backoff: %v (attempt %d), want [acked] on attempt 2", outcomes(res), res[0].Job.Attempt())
	}
}

func TestFailuresDiscarded(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		err      error
		attempts int
		reason   string
	}{
		"last attempt": {errors.New("card declined"), 1, "card declined"},
		"SkipRetry":    {conveyor.SkipRetry(errors.New("bad input")), 5, "bad input"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error { return tc.err })
			r := e.runner(t, h, &conveyortest.RunnerConfig{Retry: &retry.Rules{MaxAttempts: tc.attempts}})
			e.enqueue(t, "charge", nil, &conveyor.EnqueueOptions{ID: "charge-1"})
			res := drain(t, r, "default")
			if len(res) != 1 || res[0].Settlement.Outcome != conveyor.OutcomeDiscarded || !strings.Contains(res[0].Settlement.Reason, tc.reason) {
				t.Fatalf("results %v, want one discarded with reason %q", outcomes(res), tc.reason)
			}
			rec, err := e.d.GetDiscarded(context.Background(), "default", "charge-1")
			if err != nil || rec == nil || !strings.Contains(rec.Reason, tc.reason) {
				t.Fatalf("discard record %+v (%v), want one with reason %q", rec, err, tc.reason)
			}
		})
	}
}

func TestPanicIsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error { panic("nil map") })
	res, err := e.runner(t, h, nil).Process(context.Background(), "k", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || !strings.Contains(res.Err.Error(), "panicked: nil map") {
		t.Fatalf("Err %v, want the panic as an error", res.Err)
	}
	if res.Settlement.Outcome != conveyor.OutcomeRetried {
		t.Fatalf("settlement %v, want retried", res.Settlement.Outcome)
	}
}

// Middleware runs first outermost, and OnFinish observers see the
// settlement the runner made.
func TestMiddlewareAndObservers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var trail []string
	var seen conveyor.Settlement
	mw := func(name string) conveyor.Middleware {
		return func(next conveyor.Handler) conveyor.Handler {
			return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				trail = append(trail, name)
				job.OnFinish(func(s conveyor.Settlement) { seen = s })
				return next.ProcessJob(ctx, job)
			})
		}
	}
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		trail = append(trail, "handler")
		return conveyor.RetryAfter(time.Hour, errors.New("rate limited"))
	})
	r := e.runner(t, h, &conveyortest.RunnerConfig{Middleware: []conveyor.Middleware{mw("outer"), mw("inner")}})
	if _, err := r.Process(context.Background(), "k", nil, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(trail, []string{"outer", "inner", "handler"}) {
		t.Fatalf("ran %v, want outer, inner, handler", trail)
	}
	if want := conveyortest.DefaultStart.Add(time.Hour); seen.Outcome != conveyor.OutcomeRetried || !seen.At.Equal(want) {
		t.Fatalf("observer saw %+v, want retried at %v", seen, want)
	}
}

// A handler that hands its job back for at once cannot hang Drain.
func TestDrainStopsAfterMaxRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error { return job.Postpone(ctx, time.Time{}) })
	r := e.runner(t, h, &conveyortest.RunnerConfig{MaxRuns: 5})
	e.enqueue(t, "loop", nil, nil)
	res, err := r.Drain(context.Background(), "default")
	if err == nil || len(res) != 5 {
		t.Fatalf("Drain: %d results, error %v; want 5 and an error", len(res), err)
	}
	if _, err := r.Work(context.Background(), "empty"); !errors.Is(err, conveyortest.ErrNoJobReady) {
		t.Fatalf("Work on an empty queue: %v, want ErrNoJobReady", err)
	}
}

// A job enqueued with EnqueueOptions.Record gets its record when the
// runner settles it, result included, as under a pool; one without gets
// none.
func TestRunnerWritesTheRecordAJobAsksFor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mux := worker.NewMux()
	mux.HandleFunc("invoice", func(ctx context.Context, job *conveyor.Job) error {
		return job.SetResult([]byte(`{"invoice":"INV-9"}`))
	})
	r := e.runner(t, mux, nil)
	ctx := context.Background()
	asks, err := r.Process(ctx, "invoice", nil, &conveyor.EnqueueOptions{Record: time.Hour})
	if err != nil || asks.Settlement.Outcome != conveyor.OutcomeAcked {
		t.Fatalf("Process: %v, %+v", err, asks)
	}
	plain, err := r.Process(ctx, "invoice", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := conveyor.NewInspector(e.d, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := ins.Job(ctx, "default", asks.Job.ID, conveyor.JobFinished)
	if err != nil || j.Record.Outcome != "acked" || string(j.Record.Result) != `{"invoice":"INV-9"}` || j.Record.ExpiresAt.Sub(j.Record.FinishedAt) != time.Hour {
		t.Fatalf("record of the job that asked = %+v, %v", j, err)
	}
	if _, err := ins.Job(ctx, "default", plain.Job.ID, conveyor.JobFinished); !errors.Is(err, conveyor.ErrJobNotFound) {
		t.Fatalf("record of a job that did not ask: %v; want not found", err)
	}
}
