package conveyor

import (
	"context"
	"errors"
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestSharedRoundTripWithAFullQueue: when calls for two queues share a round
// trip and one queue is full, the other call succeeds and its job is stored
// exactly once (nothing is sent again), and only the full queue's call fails.
func TestSharedRoundTripWithAFullQueue(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d, err := list.New(rdb, &list.Config{Prefix: prefix, MaxLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := c.Enqueue(ctx, "k", nil, &EnqueueOptions{Queue: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	now := c.cfg.Now()
	ma, err := c.message(Request{Kind: "k", Opts: &EnqueueOptions{Queue: "a", ID: "id-a"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := c.message(Request{Kind: "k", Opts: &EnqueueOptions{Queue: "b"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	errs := c.sendBatches(ctx, [][]*broker.Message{{ma}, {mb}})
	if errs[0] != nil {
		t.Fatalf("call for queue a: %v, want nil", errs[0])
	}
	if !errors.Is(errs[1], ErrQueueFull) {
		t.Fatalf("call for queue b: %v, want ErrQueueFull", errs[1])
	}
	if n, err := rdb.LLen(ctx, keys.Queue(prefix, "a").Part("ready")).Result(); err != nil || n != 1 {
		t.Fatalf("queue a holds %d jobs (%v), want exactly 1", n, err)
	}
	if n, err := rdb.LLen(ctx, keys.Queue(prefix, "b").Part("ready")).Result(); err != nil || n != 2 {
		t.Fatalf("queue b holds %d jobs (%v), want 2", n, err)
	}
}
