package stream_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/stream"
)

// TestScriptsRunOnMiniredis runs every script on miniredis (gopher-lua):
// examples fall back to it, so the scripts may use nothing it lacks. A fresh
// server has no scripts loaded, which also drives Enqueue's NOSCRIPT path
// (pipelined EVALSHA, then EVAL).
func TestScriptsRunOnMiniredis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	d, err := stream.New(rc, &stream.Config{DiscardMax: 5, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	later := msg("q", "later")
	later.RunAt = time.Now().Add(2 * time.Second) // due well after the first fetch, even on a loaded machine
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "a"), msg("other", "x"), msg("q", "b"), later, msg("q", "c")}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	fetch := func() []*broker.Delivery {
		t.Helper()
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ds, err := c.Fetch(fctx, 10)
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		return ds
	}
	ds := fetch()
	if got := ids(ds); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("fetched %v, want [a b c]", got)
	}
	a, b, cc := ds[0], ds[1], ds[2]
	if err := c.Ack(ctx, a); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := c.Ack(ctx, a); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("second ack: %v, want ErrLeaseLost", err)
	}
	if err := c.Extend(ctx, 30*time.Second, b); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if err := c.Retry(ctx, b, time.Time{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := c.Discard(ctx, cc, "bad"); err != nil {
		t.Fatalf("discard: %v", err)
	}
	brokertest.Promote(t, d, "q")
	// b again (retried) and, once due, the delayed message.
	got := map[string]int{}
	for len(got) < 2 {
		for _, d := range fetch() {
			got[d.ID] = d.Retries
			if err := c.Release(ctx, d); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
	}
	if got["b"] != 1 || got["later"] != 0 {
		t.Fatalf("attempts %v, want b:1 later:0", got)
	}
	for _, d := range fetch() {
		if err := c.Ack(ctx, d); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if n, _ := rc.LLen(ctx, "conveyor:{q}:dead").Result(); n != 1 {
		t.Fatalf("discard list holds %d, want 1", n)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// A server that lost its scripts (SCRIPT FLUSH, a restart) is sent their
// text: promotion still happens after a SCRIPT FLUSH.
func TestFetchAfterScriptFlush(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	d, err := stream.New(rc, &stream.Config{PollInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	later := msg("q", "later")
	later.RunAt = time.Now().Add(2 * time.Second) // due well after the first fetch, even on a loaded machine
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "a"), later}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if ds, err := c.Fetch(fctx, 10); err != nil || !slices.Equal(ids(ds), []string{"a"}) {
		t.Fatalf("first fetch: %v %v", ids(ds), err)
	}
	if err := rc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mr.SetTime(time.Now().Add(3 * time.Second)) // the server's clock, which promotion reads
	if p, err := d.Promote(ctx, "q", 10); err != nil || p.Promoted != 1 {
		t.Fatalf("promote after SCRIPT FLUSH: %+v, %v; want 1 promoted", p, err)
	}
	if ds, err := c.Fetch(fctx, 10); err != nil || !slices.Equal(ids(ds), []string{"later"}) {
		t.Fatalf("fetch after SCRIPT FLUSH: %v %v, want [later]", ids(ds), err)
	}
}
