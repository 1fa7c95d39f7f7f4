package conveyortest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

// A worker.Pool runs on the driver unchanged: a delayed job and a retry
// run when the test advances the fake clock, with no sleep.
func TestPoolOnFakeClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ran := make(chan string, 10)
	finished := make(chan conveyor.Outcome, 10)
	fails := 1
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		ran <- r.OrderID
		if r.OrderID == "flaky" && fails > 0 {
			fails--
			return errors.New("smtp down")
		}
		return nil
	})
	observe := func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			job.OnFinish(func(s conveyor.Settlement) { finished <- s.Outcome })
			return next.ProcessJob(ctx, job)
		})
	}
	pool, err := worker.NewPool(e.d, mux, &worker.Config{
		Concurrency: 1,
		Middleware:  []conveyor.Middleware{observe},
		Retry:       &retry.Rules{Policy: retry.Constant(time.Minute), Now: e.clock.Now},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- pool.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("pool.Run: %v", err)
		}
	}()

	e.enqueue(t, "email.receipt", Receipt{OrderID: "later"}, &conveyor.EnqueueOptions{Delay: time.Hour})
	e.enqueue(t, "email.receipt", Receipt{OrderID: "flaky"}, nil)
	expect(t, ran, "flaky")
	expect(t, finished, conveyor.OutcomeRetried) // the retry is stored, due in a minute
	e.clock.Advance(time.Minute)
	expect(t, ran, "flaky")
	expect(t, finished, conveyor.OutcomeAcked)
	if len(ran) != 0 {
		t.Fatalf("the delayed job ran before its time")
	}
	e.clock.Advance(59 * time.Minute)
	expect(t, ran, "later")
	expect(t, finished, conveyor.OutcomeAcked)
}

// expect fails t unless want arrives on ch within 10s.
func expect[T comparable](t *testing.T, ch <-chan T, want T) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("got %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v within 10s", want)
	}
}
