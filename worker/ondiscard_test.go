package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/worker"
)

// OnDiscard is called once per stored discard, whether the pool discards
// (SkipRetry) or the chain does (Job.Discard); a panicking hook does not
// stop the pool.
func TestOnDiscardHook(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			mux := worker.NewMux()
			mux.HandleFunc("final", func(ctx context.Context, job *conveyor.Job) error {
				return conveyor.SkipRetry(errors.New("card declined"))
			})
			mux.HandleFunc("self", func(ctx context.Context, job *conveyor.Job) error {
				return job.Discard(ctx, "handler gave up")
			})
			mux.HandleFunc("hookpanics", func(ctx context.Context, job *conveyor.Job) error {
				return conveyor.SkipRetry(errors.New("again"))
			})
			var mu sync.Mutex
			got := map[string][]string{}
			cfg := &worker.Config{Queue: "q", OnDiscard: func(ctx context.Context, job *conveyor.Job, reason string) {
				if ctx.Err() != nil {
					t.Errorf("OnDiscard got a done context: %v", ctx.Err())
				}
				mu.Lock()
				got[job.Kind] = append(got[job.Kind], reason)
				mu.Unlock()
				if job.Kind == "hookpanics" {
					panic("hook bug")
				}
			}}
			for _, k := range []string{"hookpanics", "final", "self"} {
				if _, err := e.client.Enqueue(ctx, k, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			dead := runUntilDiscarded(t, e, mux, cfg, 3)
			if len(dead) != 3 {
				t.Fatalf("%d discarded, want 3", len(dead))
			}
			mu.Lock()
			defer mu.Unlock()
			for kind, want := range map[string]string{"final": "card declined", "self": "handler gave up", "hookpanics": "again"} {
				if rs := got[kind]; len(rs) != 1 || !strings.Contains(rs[0], want) {
					t.Errorf("OnDiscard for %s: %q, want one call with a reason containing %q", kind, rs, want)
				}
			}
		})
	}
}
