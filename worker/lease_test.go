package worker_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/worker"
)

// A job's own visibility timeout sets its lease from its start and the
// heartbeat keeps that length: a long one for a job that may stall, a short
// one for a job that must come back soon after its worker dies. (The list
// driver: its lease is a deadline in a ZSET, which the test reads.)
func TestPerJobVisibilityTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0) // list
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan string, 3)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		started <- job.ID
		<-release
		return nil
	})
	for id, vt := range map[string]time.Duration{"long": time.Hour, "short": time.Second, "default": 0} {
		if _, err := e.client.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: id, VisibilityTimeout: vt}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{VisibilityTimeout: -time.Second}); err == nil {
		t.Fatal("a negative VisibilityTimeout was accepted")
	}
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 3, VisibilityTimeout: time.Minute, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := drivertest.Background(t, p.Run)
	defer stop()
	for range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("jobs did not start")
		}
	}
	lease := keys.Queue(e.prefix, "q").Part("lease")
	deadlines := func() map[string]time.Duration {
		zs, err := e.rdb.ZRangeWithScores(ctx, lease, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Duration{}
		for _, z := range zs {
			for _, id := range []string{"long", "short", "default"} {
				if m, _ := z.Member.(string); containsID(m, id) {
					out[id] = time.Until(time.UnixMilli(int64(z.Score)))
				}
			}
		}
		return out
	}
	// Poll (with a deadline) until the short job's own lease is set, then
	// check each lease on three ticks, several heartbeats apart.
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for deadlines()["short"] > 2*time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("the short job's lease was not set to its own timeout: %v", deadlines())
		}
		<-tick.C
	}
	for i := range 3 {
		d := deadlines()
		if d["long"] < 59*time.Minute || d["long"] > time.Hour {
			t.Errorf("round %d: the long job's lease runs out in %v, want about 1h", i, d["long"])
		}
		if d["short"] <= 0 || d["short"] > time.Second {
			t.Errorf("round %d: the short job's lease runs out in %v, want within 1s (and kept alive)", i, d["short"])
		}
		if d["default"] < 50*time.Second || d["default"] > time.Minute {
			t.Errorf("round %d: the default job's lease runs out in %v, want about the pool's 1m", i, d["default"])
		}
		<-tick.C
	}
	close(release)
}

// containsID reports whether a stored message has ID id: its header ends
// in ",<len(id)>:<id>".
func containsID(stored, id string) bool {
	return strings.Contains(stored, ","+strconv.Itoa(len(id))+":"+id)
}
