package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/internal/inspecttest"
	"github.com/conveyorq/conveyor/internal/redisha"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestSplitQueueOnCluster: on a Redis Cluster (a cluster URL), a queue a
// shard.Driver split into 6 partitions is listed once by queues, with its
// jobs summed, and stats, enqueue, pause and delete act on the whole queue;
// after the delete no key of it is left on any master.
func TestSplitQueueOnCluster(t *testing.T) {
	t.Parallel()
	cl := redisha.ClusterT(t, nil)
	seeds := cl.Seeds()
	url := "redis://" + seeds[0] + "?addr=" + strings.Join(seeds[1:], "&addr=")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	in, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	d, err := shard.New(in, shard.Config{Queues: map[string]int{"orders": 6}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &cliEnv{t: t, ctx: ctx, url: url, prefix: prefix, rdb: rdb, driver: "list", d: d, client: c,
		Seeder: &inspecttest.Seeder{T: t, Ctx: ctx, Client: c, Driver: d}}
	for i := range 12 {
		e.Enqueue("orders", "pay", fmt.Sprintf("o%02d", i), nil)
	}

	r := e.ok("queues")
	if strings.Contains(r.out, "orders#") {
		t.Fatalf("queues lists partitions:\n%s", r.out)
	}
	wantFields(t, r.out, "orders", "list", "12", "0", "0", "0", "no", "0", "0", "-", "-")
	e.ok("enqueue", "orders", "pay", "-payload", "{}")
	r = e.ok("stats", "orders", "-json")
	if !strings.Contains(r.out, `"ready": 13`) {
		t.Fatalf("stats orders -json after an enqueue: %s; want 13 ready", r.out)
	}
	e.ok("pause", "orders")
	wantFields(t, e.ok("queues").out, "orders", "list", "13", "0", "0", "0", "yes", "0", "0", "-", "-")
	e.ok("delete", "orders", "-force", "-yes")
	var left []string
	for _, k := range redistest.AllKeys(t, rdb, prefix) {
		if strings.Contains(k, "{orders") {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Fatalf("keys of orders left after delete: %q", left)
	}
}
