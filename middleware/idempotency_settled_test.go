package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/middleware"
)

// A handler that hands its job back (Postpone) and returns nil has not done
// its work: the key is released, not marked done, so the job runs when it
// comes back.
func TestIdempotencyHandedBackIsNotDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mw, err := middleware.Idempotency(e.rdb, &middleware.IdempotencyConfig{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := mw(conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		runs++
		if runs == 1 {
			return job.Postpone(ctx, time.Now().Add(time.Hour))
		}
		return nil
	}))
	ctx := context.Background()
	for i := range 2 {
		s := &fakeSettler{}
		job := newJob(s, "j1", "k", map[string]string{"idempotency-key": "pay:1"})
		if err := h.ProcessJob(ctx, job); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if runs != 2 {
		t.Fatalf("handler ran %d times, want 2: the postponed run must not mark the key done", runs)
	}
}
