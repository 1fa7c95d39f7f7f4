package workers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/workers"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	r := workers.New(rdb, redistest.Prefix(t))
	ctx := context.Background()

	a := &broker.WorkerInfo{ID: "host-1-a", PID: 1, Queues: []string{"q"}, Concurrency: 3,
		Running: []broker.RunningJob{{ID: "j1", Kind: "k", Queue: "q", StartedAt: time.UnixMilli(1000)}}, RunningTotal: 1}
	b := &broker.WorkerInfo{ID: "host-2-b", PID: 2}
	for _, w := range []*broker.WorkerInfo{b, a, a} { // a renews once
		if err := r.RegisterWorker(ctx, w, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := r.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].ID != a.ID || ws[1].ID != b.ID || len(ws[0].Running) != 1 || ws[0].Running[0].ID != "j1" {
		t.Fatalf("workers: %+v", ws)
	}

	// An entry that ran out is gone from the listing and from the index.
	if err := rdb.PExpire(ctx, r.EntryKey(b.ID), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if n, err := rdb.Exists(ctx, r.EntryKey(b.ID)).Result(); err != nil || n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry did not expire")
		}
	}
	if ws, err = r.Workers(ctx); err != nil || len(ws) != 1 || ws[0].ID != a.ID {
		t.Fatalf("after b's entry ran out: %+v, %v", ws, err)
	}
	if ok, err := rdb.SIsMember(ctx, r.IndexKey(), b.ID).Result(); err != nil || ok {
		t.Fatalf("b is still in the index (%v, %v)", ok, err)
	}
	// b beats again: back in the index.
	if err := r.RegisterWorker(ctx, b, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ws, err = r.Workers(ctx); err != nil || len(ws) != 2 {
		t.Fatalf("after b registered again: %+v, %v", ws, err)
	}

	for _, id := range []string{a.ID, b.ID} {
		if err := r.UnregisterWorker(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if ks := redistest.AllKeys(t, rdb, strings.TrimSuffix(r.IndexKey(), ":{workers}:index")); len(ks) != 0 {
		t.Fatalf("keys left: %v", ks)
	}
}

func TestRegistryRefusesBadIDs(t *testing.T) {
	t.Parallel()
	r := workers.New(redistest.Client(t), redistest.Prefix(t))
	for _, id := range []string{"", "a b", "x{y}", "tab\t", strings.Repeat("x", 201), "é"} {
		if err := r.RegisterWorker(context.Background(), &broker.WorkerInfo{ID: id}, time.Second); err == nil {
			t.Errorf("RegisterWorker accepted ID %q", id)
		}
	}
}

// TestNewIDIsValid: an ID made from any host name registers.
func TestNewIDIsValid(t *testing.T) {
	t.Parallel()
	r := workers.New(redistest.Client(t), redistest.Prefix(t))
	ctx := context.Background()
	for _, host := range []string{"", "web-1", "a b{c}\té", strings.Repeat("h", 300)} {
		id := workers.NewID(host, 12345)
		if err := r.RegisterWorker(ctx, &broker.WorkerInfo{ID: id}, time.Minute); err != nil {
			t.Errorf("NewID(%q) = %q: %v", host, id, err)
		}
		if err := r.UnregisterWorker(ctx, id); err != nil {
			t.Error(err)
		}
	}
}
