package main

import (
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// TestWorkers lists a registered pool and its running jobs.
func TestWorkers(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "list")
	r := e.ok("workers")
	if r.out != "" || !strings.Contains(r.errOut, "No live worker pools") {
		t.Errorf("workers of an empty fleet: stdout %q stderr %q", r.out, r.errOut)
	}
	now := time.Now().Truncate(time.Millisecond)
	w := &broker.WorkerInfo{
		ID: "host1-42-abc", Host: "host1", PID: 42, Queues: []string{"work", "mail"}, Concurrency: 8,
		Running:      []broker.RunningJob{{ID: "j1", Kind: "mail", Queue: "work", StartedAt: now.Add(-time.Minute)}},
		RunningTotal: 1, StartedAt: now.Add(-time.Hour), SeenAt: now, Version: "(devel)",
	}
	if err := e.d.(broker.WorkerRegistry).RegisterWorker(e.ctx, w, time.Minute); err != nil {
		t.Fatal(err)
	}
	r = e.ok("workers")
	wantFields(t, r.out, "host1-42-abc", "host1", "42", "work,mail", "8", "1", "1h0m0s", "ago", "now", "(devel)")
	r = e.ok("workers", "-running")
	if !strings.Contains(r.out, "host1-42-abc runs 1 jobs:") || fields(r.out, "j1") == nil {
		t.Errorf("workers -running lacks the running job:\n%s", r.out)
	}
	var got struct{ Workers []*broker.WorkerInfo }
	e.json(&got, "workers")
	if len(got.Workers) != 1 || got.Workers[0].ID != w.ID || got.Workers[0].Concurrency != 8 ||
		len(got.Workers[0].Running) != 1 || got.Workers[0].Running[0].ID != "j1" {
		t.Errorf("workers -json = %+v", got.Workers)
	}
}
