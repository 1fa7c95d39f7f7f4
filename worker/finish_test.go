package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/worker"
)

var errFail = errors.New("fail")

// TestFinishOutcomes: the pool tells each job's OnFinish observers how its
// delivery ended, once, for the outcomes the pool decides after the chain
// returns (a batched ack, the retry policy, a discard), for a postponement
// the chain made, and for a job handed back at shutdown.
func TestFinishOutcomes(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			type fin struct {
				kind    string
				attempt int
				s       conveyor.Settlement
			}
			finished := make(chan fin, 100)
			started := make(chan struct{}, 1)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				job.OnFinish(func(s conveyor.Settlement) { finished <- fin{job.Kind, job.Retries, s} })
				switch job.Kind {
				case "fail":
					if job.Retries == 0 {
						return conveyor.RetryAfter(50*time.Millisecond, errFail)
					}
				case "skip":
					return conveyor.SkipRetry(errFail)
				case "later":
					if job.Retries == 0 && job.Recoveries == 0 {
						if err := job.Postpone(ctx, time.Now().Add(time.Hour)); err != nil {
							return err
						}
					}
				case "block":
					started <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			})
			p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", ShutdownGrace: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			for _, kind := range []string{"ok", "fail", "skip", "later"} {
				if _, err := e.client.Enqueue(ctx, kind, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string]conveyor.Settlement{}
			deadline := time.After(20 * time.Second)
			for len(got) < 5 {
				select {
				case f := <-finished:
					key := f.kind
					if f.attempt > 0 {
						key += "/again"
					}
					if _, dup := got[key]; dup {
						t.Fatalf("%s finished twice", key)
					}
					got[key] = f.s
				case <-deadline:
					t.Fatalf("finished: %v", got)
				}
			}
			want := map[string]conveyor.Outcome{
				"ok": conveyor.OutcomeAcked, "fail": conveyor.OutcomeRetried, "fail/again": conveyor.OutcomeAcked,
				"skip": conveyor.OutcomeDiscarded, "later": conveyor.OutcomePostponed,
			}
			for k, o := range want {
				if got[k].Outcome != o {
					t.Errorf("%s: outcome %v, want %v", k, got[k].Outcome, o)
				}
			}
			if at := got["fail"].At; at.IsZero() {
				t.Errorf("retried job: no run-again time")
			}
			if at := got["later"].At; time.Until(at) < 50*time.Minute {
				t.Errorf("postponed job: runs again at %v, want about an hour from now", at)
			}
			if r := got["skip"].Reason; r == "" {
				t.Errorf("discarded job: no reason")
			}
			// A job still running when the grace runs out is handed back.
			if _, err := e.client.Enqueue(ctx, "block", nil, nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the blocking job", 20*time.Second, started)
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			select {
			case f := <-finished:
				if f.kind != "block" || f.s.Outcome != conveyor.OutcomeReleased {
					t.Errorf("at shutdown %s finished %v, want block released", f.kind, f.s.Outcome)
				}
			default:
				t.Error("the job handed back at shutdown never finished")
			}
		})
	}
}
