package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/middleware"
)

// TestTimeoutPicksTheDeadline: the job's own Timeout wins, then its kind's,
// then the default; with none, no deadline.
func TestTimeoutPicksTheDeadline(t *testing.T) {
	t.Parallel()
	mw, err := middleware.Timeout(&middleware.TimeoutConfig{
		Default: time.Hour,
		Kinds:   map[string]time.Duration{"fast": time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	none, err := middleware.Timeout(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mw      conveyor.Middleware
		kind    string
		timeout time.Duration
		want    time.Duration // 0: no deadline
	}{
		{"default", mw, "other", 0, time.Hour},
		{"kind", mw, "fast", 0, time.Minute},
		{"job wins over kind", mw, "fast", 2 * time.Hour, 2 * time.Hour},
		{"job wins over default", mw, "other", 3 * time.Second, 3 * time.Second},
		{"none", none, "other", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(&fakeSettler{}, "1", tc.kind, nil)
			job.Timeout = tc.timeout
			var (
				deadline time.Time
				has      bool
			)
			before := time.Now()
			err := tc.mw(conveyor.HandlerFunc(func(ctx context.Context, _ *conveyor.Job) error {
				deadline, has = ctx.Deadline()
				return nil
			})).ProcessJob(context.Background(), job)
			after := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == 0 {
				if has {
					t.Fatalf("deadline %v, want none", deadline)
				}
				return
			}
			if !has || deadline.Before(before.Add(tc.want)) || deadline.After(after.Add(tc.want)) {
				t.Fatalf("deadline %v (set %v), want now+%v", deadline, has, tc.want)
			}
		})
	}
}

// TestTimeoutReportsOverrunHandlers: a handler that returns nil after its
// deadline (as one that ignores its context does) is reported as failed
// with context.DeadlineExceeded; an error it returns late keeps its own
// identity too; a handler that settled its job, one that finished in time
// and one whose context was cancelled for another reason are left alone.
// The handler runs in the caller's goroutine: nothing is left running.
func TestTimeoutReportsOverrunHandlers(t *testing.T) {
	t.Parallel()
	mw, err := middleware.Timeout(&middleware.TimeoutConfig{Default: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, job *conveyor.Job, h conveyor.HandlerFunc) error {
		return mw(h).ProcessJob(ctx, job)
	}
	bg := context.Background()
	s := &fakeSettler{}

	caller := goid()
	var handlerG uint64
	err = run(bg, newJob(s, "late", "k", nil), func(ctx context.Context, _ *conveyor.Job) error {
		handlerG = goid()
		<-ctx.Done() // the deadline passes; the handler then returns as if it had not looked
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late nil: err = %v, want context.DeadlineExceeded", err)
	}
	if handlerG != caller {
		t.Fatalf("handler ran in goroutine %d, caller is %d: it must run in the caller's", handlerG, caller)
	}

	err = run(bg, newJob(s, "late-err", "k", nil), func(ctx context.Context, _ *conveyor.Job) error {
		<-ctx.Done()
		return errBoom
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errBoom) {
		t.Fatalf("late error: err = %v, want both DeadlineExceeded and errBoom", err)
	}

	err = run(bg, newJob(s, "settled", "k", nil), func(ctx context.Context, job *conveyor.Job) error {
		<-ctx.Done()
		return job.Ack(context.Background())
	})
	if err != nil {
		t.Fatalf("late but settled: err = %v, want nil", err)
	}

	if err := run(bg, newJob(s, "fast", "k", nil), func(context.Context, *conveyor.Job) error { return nil }); err != nil {
		t.Fatalf("in time: err = %v", err)
	}

	cctx, cancel := context.WithCancel(bg)
	err = run(cctx, newJob(s, "cancelled", "k", nil), func(ctx context.Context, _ *conveyor.Job) error {
		cancel()
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatalf("cancelled (not timed out): err = %v, want the handler's nil", err)
	}
}

func TestTimeoutRejectsNegative(t *testing.T) {
	t.Parallel()
	if _, err := middleware.Timeout(&middleware.TimeoutConfig{Default: -time.Second}); err == nil {
		t.Fatal("negative Default accepted")
	}
	if _, err := middleware.Timeout(&middleware.TimeoutConfig{Kinds: map[string]time.Duration{"k": -1}}); err == nil {
		t.Fatal("negative kind timeout accepted")
	}
}
