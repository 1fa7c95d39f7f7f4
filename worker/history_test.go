package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/history"
	"github.com/conveyorq/conveyor/worker"
)

// TestHistorySampledByKeeper: the pools of a queue record its history, one
// sample per interval however many pools serve it, and the samples follow
// the jobs the pools process.
func TestHistorySampledByKeeper(t *testing.T) {
	t.Parallel()
	const jobs = 20
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			insp, err := conveyor.NewInspector(e.d, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{}, jobs)
			h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error {
				done <- struct{}{}
				return nil
			})
			for range 2 {
				p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 2, HistoryEvery: time.Second, HistoryKeep: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(drivertest.Background(t, p.Run))
			}
			for k := range jobs {
				if _, err := e.client.Enqueue(ctx, "count", []byte(fmt.Sprint(k)), nil); err != nil {
					t.Fatal(err)
				}
			}
			for range jobs {
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("the jobs were not handled within 30s")
				}
			}
			waitUntil(t, "a sample with every job processed", 10*time.Second, func() (bool, string) {
				s, err := insp.History(ctx, "q", time.Time{})
				if err != nil {
					return false, err.Error()
				}
				if len(s) > 0 && s[len(s)-1].Processed == jobs {
					return true, ""
				}
				return false, fmt.Sprintf("samples %+v", s)
			})
			s, err := insp.History(ctx, "q", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			for k := 1; k < len(s); k++ {
				if !s[k].At.After(s[k-1].At) || s[k].At.UnixMilli()%1000 != 0 {
					t.Fatalf("samples %v then %v: want one per one-second interval, at its start", s[k-1].At, s[k].At)
				}
				if s[k].Processed < s[k-1].Processed {
					t.Fatalf("processed went back from %d to %d", s[k-1].Processed, s[k].Processed)
				}
			}
		})
	}
}

// TestHistoryConfig: the pool refuses intervals the history cannot keep,
// and its default interval is the one readers of the history assume.
func TestHistoryConfig(t *testing.T) {
	t.Parallel()
	if worker.DefaultHistoryEvery != history.DefaultEvery {
		t.Errorf("DefaultHistoryEvery %v, but the readers' rates assume %v", worker.DefaultHistoryEvery, history.DefaultEvery)
	}
	e := newEnv(t, 0)
	h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil })
	for _, c := range []worker.Config{
		{HistoryEvery: time.Millisecond},
		{HistoryEvery: time.Hour, HistoryKeep: time.Minute},
	} {
		if _, err := worker.NewPool(e.d, h, &c); err == nil {
			t.Errorf("NewPool with HistoryEvery %v, HistoryKeep %v: nil error", c.HistoryEvery, c.HistoryKeep)
		}
	}
	for _, c := range []worker.Config{{HistoryEvery: -1}, {HistoryEvery: 2 * 24 * time.Hour}} {
		if _, err := worker.NewPool(e.d, h, &c); err != nil {
			t.Errorf("NewPool with HistoryEvery %v: %v", c.HistoryEvery, err)
		}
	}
}
