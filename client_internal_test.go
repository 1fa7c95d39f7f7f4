package conveyor

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/shard"
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

// TestSharedRoundTripWithAFullPartition: two calls share a round trip to
// a queue split in 2 partitions (broker/shard), one of them full; the call
// whose job went to the other partition succeeds and its job is stored
// once, the other gets ErrQueueFull and stores nothing.
func TestSharedRoundTripWithAFullPartition(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	in, err := list.New(rdb, &list.Config{Prefix: prefix, MaxLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	d, err := shard.New(in, shard.Config{Queues: map[string]int{"s": 2}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := c.cfg.Now()
	// Messages for each partition, by ID.
	byPart := map[string][]*broker.Message{}
	for i := 0; len(byPart[d.Partitions("s")[0]]) < 1 || len(byPart[d.Partitions("s")[1]]) < 3; i++ {
		m, err := c.message(Request{Kind: "k", Opts: &EnqueueOptions{Queue: "s", ID: fmt.Sprintf("id-%d", i)}}, now)
		if err != nil {
			t.Fatal(err)
		}
		p := d.PartitionOf(m)
		byPart[p] = append(byPart[p], m)
	}
	free, full := byPart[d.Partitions("s")[0]][0], byPart[d.Partitions("s")[1]]
	if err := d.Enqueue(ctx, full[:2]); err != nil {
		t.Fatal(err)
	}
	errs := c.sendBatches(ctx, [][]*broker.Message{{free}, {full[2]}})
	if errs[0] != nil {
		t.Fatalf("call whose job went to the free partition: %v, want nil", errs[0])
	}
	if !errors.Is(errs[1], ErrQueueFull) {
		t.Fatalf("call whose job went to the full partition: %v, want ErrQueueFull", errs[1])
	}
	for k, want := range []int64{1, 2} {
		p := d.Partitions("s")[k]
		if n, err := rdb.LLen(ctx, keys.Queue(prefix, p).Part("ready")).Result(); err != nil || n != want {
			t.Fatalf("partition %s holds %d jobs (%v), want %d", p, n, err, want)
		}
	}
}
