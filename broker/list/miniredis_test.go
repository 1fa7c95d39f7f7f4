package list_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
)

// TestScriptsRunOnMiniredis runs every script on miniredis (gopher-lua):
// examples fall back to it, so the scripts may use nothing it lacks. A fresh
// server has no scripts loaded, which also drives Enqueue's NOSCRIPT path.
func TestScriptsRunOnMiniredis(t *testing.T) {
	t.Parallel()
	mr, rc, d := onMiniredis(t, &list.Config{DiscardMax: 5})
	now := time.Now()
	mr.SetTime(now)
	ctx := context.Background()
	later := msg("q", "later")
	later.RunAt = now.Add(time.Hour)
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "a"), msg("other", "x"), msg("q", "b"), later, msg("q", "c")}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "d")}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	ds := fetch(t, c, 10)
	if got := ids(ds); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("fetched %v, want [a b c d]", got)
	}
	a, b, cc, dd := ds[0], ds[1], ds[2], ds[3]
	if err := c.Ack(ctx, a); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := c.Ack(ctx, a); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("second ack: %v, want ErrLeaseLost", err)
	}
	// LeaseDeadline is by the local clock, whatever the server's says.
	before := time.Now()
	if err := c.Extend(ctx, 2*time.Minute, b); err != nil || b.LeaseDeadline.Before(before.Add(2*time.Minute-time.Millisecond)) ||
		b.LeaseDeadline.After(time.Now().Add(2*time.Minute)) {
		t.Fatalf("extend: %v, deadline %v from now", err, time.Until(b.LeaseDeadline))
	}
	if err := c.Retry(ctx, b, time.Time{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := c.Release(ctx, cc); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := c.Discard(ctx, dd, "bad"); err != nil {
		t.Fatalf("discard: %v", err)
	}
	ds = fetch(t, c, 10)
	if got := ids(ds); !slices.Equal(got, []string{"c", "b"}) || ds[1].Retries != 1 {
		t.Fatalf("after release and retry: %v, want [c b] with b at attempt 1", got)
	}

	// Time moves past the leases and the delayed message's run-at.
	mr.SetTime(now.Add(2 * time.Hour))
	n, err := d.Reap(ctx, "q")
	if err != nil || n != 2 {
		t.Fatalf("reap: %d, %v; want 2", n, err)
	}
	if p, err := d.Promote(ctx, "q", 10); err != nil || p.Promoted != 1 || p.Next >= 0 {
		t.Fatalf("promote: %+v, %v; want 1 promoted and none left", p, err)
	}
	// Equal deadlines: the reaper takes them in member order, and the
	// receipts of one fetch differ only in the ID: b's sorts before c's.
	// One recovery is not a last chance under the default cap of 3, so the
	// recovered messages come in one fetch with the promoted one.
	ds = fetch(t, c, 10)
	if got := ids(ds); !slices.Equal(got, []string{"b", "c", "later"}) {
		t.Fatalf("after reap: fetched %v, want [b c later]", got)
	}
	for _, d := range ds {
		if recovered := d.Recoveries == 1; recovered != (d.ID != "later") || d.LastChance {
			t.Fatalf("%s has Recoveries %d, LastChance %v", d.ID, d.Recoveries, d.LastChance)
		}
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	expectEmpty(t, c, 50*time.Millisecond)
	if n, _ := rc.LLen(ctx, "conveyor:{q}:dead").Result(); n != 1 {
		t.Fatalf("dead holds %d, want 1", n)
	}
}

// TestDeliveriesCountOnMiniredis: the delivery count goes up by one per
// delivery on gopher-lua too (its number formatting differs).
func TestDeliveriesCountOnMiniredis(t *testing.T) {
	t.Parallel()
	_, rc, d := onMiniredis(t, nil)
	c := leaseOne(t, d)
	ctx := context.Background()
	for want := 1; want <= 12; want++ {
		dl := fetch(t, c, 1)[0]
		if n := storedDeliveries(t, rc, "conveyor:{q}:inflight", dl); n != want || !strings.HasSuffix(dl.Receipt, ",1:a") {
			t.Fatalf("delivery %d: deliveries %d, receipt %s", want, n, dl.Receipt)
		}
		if err := c.Release(ctx, dl); err != nil {
			t.Fatal(err)
		}
	}
}

// onMiniredis returns an embedded Redis, a client on it and a list driver
// with cfg, all closed when t ends.
func onMiniredis(t *testing.T, cfg *list.Config) (*miniredis.Miniredis, redis.UniversalClient, *list.Driver) {
	t.Helper()
	mr := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	d, err := list.New(rc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mr, rc, d
}

// leaseOne enqueues message "a" on queue "q" of d and opens a consumer of
// "q" with a one-minute lease, closed when t ends.
func leaseOne(t *testing.T, d *list.Driver) broker.Consumer {
	t.Helper()
	ctx := context.Background()
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "a")}); err != nil {
		t.Fatal(err)
	}
	c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
