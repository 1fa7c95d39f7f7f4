package list_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestDeleteQueueNeedsScan: the least-privilege user of docs/redis-keys.md
// may not SCAN, so its DeleteQueue fails saying so, before it deletes
// anything; the same user with +scan deletes the queue.
func TestDeleteQueueNeedsScan(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, rdb := redistest.ACLUser(t, redistest.LeastPrivilege(prefix)...)
	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteQueue(ctx, "q", true); err == nil || !strings.Contains(err.Error(), "+scan") {
		t.Fatalf("DeleteQueue as a user without SCAN: %v, want an error naming +scan", err)
	}
	admin := redistest.Client(t)
	if n, err := admin.LLen(ctx, keys.Queue(prefix, "q").Part("ready")).Result(); err != nil || n != 1 {
		t.Fatalf("after a refused delete the ready list holds %d, %v; want the job", n, err)
	}
	if qs, err := d.Queues(ctx); err != nil || len(qs) != 1 {
		t.Fatalf("Queues after a refused delete = %q, %v; want q", qs, err)
	}

	_, rdb = redistest.ACLUser(t, append(redistest.LeastPrivilege(prefix), "+scan")...)
	if d, err = list.New(rdb, &list.Config{Prefix: prefix}); err != nil {
		t.Fatal(err)
	}
	res, err := d.DeleteQueue(ctx, "q", false)
	if err != nil || res.Ready != 1 || !res.Registered {
		t.Fatalf("DeleteQueue with +scan = %+v, %v; want 1 ready job deleted", res, err)
	}
}

// TestDeleteQueueOnMiniredis: the delete script and its SCAN run on
// miniredis too (examples fall back to it), refusing and then deleting.
func TestDeleteQueueOnMiniredis(t *testing.T) {
	t.Parallel()
	mr, _, d := onMiniredis(t, nil)
	c := leaseOne(t, d)
	ctx := context.Background()
	fetch(t, c, 1)
	u := msg("q", "b")
	u.UniqueKey, u.UniqueTTL = "k", time.Hour
	if err := d.Enqueue(ctx, []*broker.Message{u}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteQueue(ctx, "q", false); !errors.Is(err, broker.ErrJobsInFlight) {
		t.Fatalf("DeleteQueue(force=false) with a job in flight: %v, want ErrJobsInFlight", err)
	}
	res, err := d.DeleteQueue(ctx, "q", true)
	if err != nil || res.Ready != 1 || res.InFlight != 1 || !res.Registered {
		t.Fatalf("DeleteQueue(force=true) = %+v, %v; want 1 ready, 1 in flight, registered", res, err)
	}
	if ks := mr.Keys(); len(ks) != 0 {
		t.Fatalf("keys left: %q", ks)
	}
}
