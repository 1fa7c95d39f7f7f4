package stream_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
)

// A consumer whose lease expired and whose entry another consumer took over
// cannot settle or extend it; the entry stays with the new owner.
func TestFencingReclaimedEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 20 * time.Millisecond})
	e.enqueue(msg("q", "a"))
	c1 := e.open("q", 100*time.Millisecond)
	c2 := e.open("q", 100*time.Millisecond)

	d1 := e.fetch(c1, 1)[0]
	// c2 finds nothing new; it blocks and retries until the lease of d1 is
	// 100ms idle and XAUTOCLAIM hands it over.
	d2 := e.fetch(c2, 1)[0]
	if d2.ID != "a" || d2.Receipt != d1.Receipt || d2.Token != d2.Receipt+"/2" || d2.Recoveries != 1 || d2.Retries != 0 {
		t.Fatalf("reclaimed delivery: id %s receipt %s/%s token %s recoveries %d attempt %d",
			d2.ID, d2.Receipt, d1.Receipt, d2.Token, d2.Recoveries, d2.Retries)
	}

	ctx := context.Background()
	for name, err := range map[string]error{
		"Ack":     c1.Ack(ctx, d1),
		"Extend":  c1.Extend(ctx, time.Second, d1),
		"Retry":   c1.Retry(ctx, d1, time.Time{}),
		"Release": c1.Release(ctx, d1),
		"Discard": c1.Discard(ctx, d1, "no"),
	} {
		if !errors.Is(err, broker.ErrLeaseLost) {
			t.Errorf("stale %s: %v, want ErrLeaseLost", name, err)
		}
	}
	// Same consumer, right receipt, stale token: also refused.
	stale := *d2
	stale.Token = d2.Receipt + "/1"
	if err := c2.Ack(ctx, &stale); !errors.Is(err, broker.ErrLeaseLost) {
		t.Errorf("Ack with stale token: %v, want ErrLeaseLost", err)
	}

	owner, count, _, ok := e.pending("q", d1.Receipt)
	if !ok || owner != stream.ConsumerName(c2) || count != 2 {
		t.Fatalf("after stale settles: pending %v owner %q count %d, want c2 and 2", ok, owner, count)
	}
	if n, _ := e.rdb.XLen(ctx, e.key("q", "stream")).Result(); n != 1 {
		t.Fatalf("stream length %d, want 1 (stale settles must not delete or add)", n)
	}
	if err := c2.Ack(ctx, d2); err != nil {
		t.Fatalf("Ack by new owner: %v", err)
	}
	if got := e.d.Stats().Reclaimed; got != 1 {
		t.Fatalf("Stats().Reclaimed = %d, want 1", got)
	}
}

// An entry deleted by hand while pending is reported (log + counter) when
// XAUTOCLAIM drops it, not silently forgotten.
func TestDeletedWhilePending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 20 * time.Millisecond})
	e.enqueue(msg("q", "a"), msg("q", "b"))
	c1 := e.open("q", 100*time.Millisecond)
	ds := e.fetch(c1, 2)
	if len(ds) != 2 {
		t.Fatalf("fetched %d, want 2", len(ds))
	}
	ctx := context.Background()
	if err := e.rdb.XDel(ctx, e.key("q", "stream"), ds[0].Receipt).Err(); err != nil {
		t.Fatal(err)
	}

	// c2 reclaims b and meets a's deleted entry in the same XAUTOCLAIM.
	c2 := e.open("q", 100*time.Millisecond)
	got := e.fetch(c2, 10)
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("reclaimed %v, want [b]", ids(got))
	}
	if n := e.d.Stats().DeletedWhilePending; n != 1 {
		t.Fatalf("Stats().DeletedWhilePending = %d, want 1", n)
	}
	if rec := e.logs.find(slog.LevelWarn, "deleted"); !strings.Contains(rec, ds[0].Receipt) || !strings.Contains(rec, "queue=q") {
		t.Fatalf("warning %q does not name entry %s of queue q", rec, ds[0].Receipt)
	}
	if _, _, _, ok := e.pending("q", ds[0].Receipt); ok {
		t.Fatal("deleted entry still pending")
	}
	if err := c1.Ack(ctx, ds[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack of the deleted entry: %v, want ErrLeaseLost", err)
	}
	if err := c2.Ack(ctx, got...); err != nil {
		t.Fatal(err)
	}
}

// Crash recoveries so far are carried into the message on retry and
// release, where the new entry's delivery count starts again.
func TestRecoveriesCarried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 10 * time.Millisecond})
	e.enqueue(msg("q", "a"))
	ctx := context.Background()
	c1 := e.open("q", 50*time.Millisecond)
	e.fetch(c1, 1)
	c2 := e.open("q", 50*time.Millisecond)
	d := e.fetch(c2, 1)[0] // reclaimed: recoveries 1
	if d.Recoveries != 1 {
		t.Fatalf("recoveries %d, want 1", d.Recoveries)
	}
	if err := c2.Retry(ctx, d, time.Time{}); err != nil {
		t.Fatal(err)
	}
	c3 := e.open("q", time.Minute)
	d = e.fetch(c3, 1)[0]
	if d.Recoveries != 1 || d.Retries != 1 || !strings.HasSuffix(d.Token, "/1") {
		t.Fatalf("after retry: recoveries %d attempt %d token %s, want 1 1 1", d.Recoveries, d.Retries, d.Token)
	}
	if err := c3.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	d = e.fetch(c3, 1)[0]
	if d.Recoveries != 1 || d.Retries != 1 {
		t.Fatalf("after release: recoveries %d attempt %d, want 1 1", d.Recoveries, d.Retries)
	}
	if err := c3.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.enqueue(msg("q", "a"))
	c := e.open("q", 30*time.Second)
	d := e.fetch(c, 1)[0]
	ctx := context.Background()
	name := stream.ConsumerName(c)
	// Pretend 100s have passed since the delivery.
	if err := e.rdb.Do(ctx, "XCLAIM", e.key("q", "stream"), "conveyor", name, 0, d.Receipt, "IDLE", 100000, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, idle, _ := e.pending("q", d.Receipt); idle < 100*time.Second {
		t.Fatalf("idle %v after setup, want >= 100s", idle)
	}

	start := time.Now()
	if err := c.Extend(ctx, 10*time.Second, d); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	owner, count, idle, ok := e.pending("q", d.Receipt)
	if !ok || owner != name || count != 1 {
		t.Fatalf("after Extend: owner %q count %d ok %v", owner, count, ok)
	}
	// Expires 10s from now against a 30s visibility timeout: idle 20s.
	if idle < 20*time.Second || idle > 21*time.Second {
		t.Fatalf("idle %v after Extend(10s), want ~20s", idle)
	}
	if dl := d.LeaseDeadline; dl.Before(start.Add(10*time.Second)) || dl.After(time.Now().Add(10*time.Second)) {
		t.Fatalf("LeaseDeadline %v, want now+10s", dl)
	}

	// Past the visibility timeout: capped, and LeaseDeadline says so.
	if err := c.Extend(ctx, time.Hour, d); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if _, _, idle, _ := e.pending("q", d.Receipt); idle > time.Second {
		t.Fatalf("idle %v after Extend(1h), want ~0", idle)
	}
	if dl := d.LeaseDeadline; dl.After(time.Now().Add(30 * time.Second)) {
		t.Fatalf("LeaseDeadline %v beyond one visibility timeout", dl)
	}
	if err := c.Extend(ctx, 0, d); err == nil {
		t.Fatal("Extend(0) accepted")
	}
	// The token still holds: Extend did not bump the delivery count.
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack after Extend: %v", err)
	}
}
