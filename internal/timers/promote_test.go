package timers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/timers"
)

// TestPromoteFailurePutsTimersBack: Redis keeps what a failed script wrote,
// and promote.lua removes due timers before it pushes them (so that it
// runs on a full Redis). When the push fails (here the queue's ready key
// holds another type, written by hand) the timers are put back, with their
// due times, before the error is raised: none is lost, and once the key is
// mended the next promotion moves them.
func TestPromoteFailurePutsTimersBack(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			d := drv.Must(t, rdb, prefix)
			tm, ok := d.(broker.Timers)
			if !ok {
				t.Fatalf("the %s driver has no timers", drv.Name)
			}
			at := time.Now().Add(30 * time.Millisecond)
			if err := d.Enqueue(ctx, []*broker.Message{job("a", at), job("b", at.Add(time.Millisecond))}); err != nil {
				t.Fatal(err)
			}
			k := timers.QueueKeys(prefix, "q")
			before, err := rdb.ZRangeWithScores(ctx, k.Delayed, 0, -1).Result()
			if err != nil || len(before) != 2 {
				t.Fatalf("timers stored: %v (%v), want 2", before, err)
			}
			ready := drv.ReadyKey(prefix, "q")
			if err := rdb.Set(ctx, ready, "not a queue", 0).Err(); err != nil {
				t.Fatal(err)
			}
			// Promote until the timers are due and the push fails.
			deadline := time.Now().Add(5 * time.Second)
			for err == nil {
				if time.Now().After(deadline) {
					t.Fatal("Promote never failed on a ready key of the wrong type")
				}
				var p broker.Promotion
				p, err = tm.Promote(ctx, "q", 10)
				if err == nil && p.Promoted > 0 {
					t.Fatalf("Promote moved %d timers onto a key of the wrong type", p.Promoted)
				}
			}
			if !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("Promote failed with %v, want the push's WRONGTYPE", err)
			}
			if after, err := rdb.ZRangeWithScores(ctx, k.Delayed, 0, -1).Result(); err != nil || !slices.Equal(after, before) {
				t.Fatalf("timers after the failed promotion: %v (%v), want %v", after, err, before)
			}
			if n, err := rdb.HLen(ctx, k.Timers).Result(); err != nil || n != 2 {
				t.Fatalf("timer bodies after the failed promotion: %d (%v), want 2", n, err)
			}
			if err := rdb.Del(ctx, ready).Err(); err != nil {
				t.Fatal(err)
			}
			for promoted := 0; promoted < 2; {
				if time.Now().After(deadline) {
					t.Fatalf("%d timers promoted after the key was mended, want 2", promoted)
				}
				p, err := tm.Promote(ctx, "q", 10)
				if err != nil {
					t.Fatalf("Promote after the key was mended: %v", err)
				}
				promoted += p.Promoted
			}
			if n, err := drv.ReadyLen(ctx, rdb, prefix, "q"); err != nil || n != 2 {
				t.Fatalf("ready after the promotion: %d (%v), want 2", n, err)
			}
		})
	}
}
