package shard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestConformance runs the conformance suite on queues of 6 partitions
// over the list driver, and on a Redis Cluster (make test-cluster) over
// the stream driver too and of 1 partition too. On one server a
// shard.Driver of 1 partition passes each call through, which the
// drivers' own runs of the suite cover, and what the split adds is the
// same over either driver: make test, on 2 cores, runs the one.
func TestConformance(t *testing.T) {
	counts, drivers := []int{6}, []string{"list"}
	if redistest.IsCluster() {
		counts, drivers = []int{1, 6}, []string{"list", "stream"}
	}
	for _, n := range counts {
		for _, driver := range drivers {
			t.Run(fmt.Sprintf("%s/partitions=%d", driver, n), func(t *testing.T) {
				t.Parallel()
				brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
					rdb := brokertest.Client(t)
					inner := innerDriver(t, driver, rdb, prefix)
					d, err := shard.New(inner, shard.Config{Partitions: n})
					if err != nil {
						t.Fatal(err)
					}
					return rawStorer{d, rdb, prefix, driver}
				})
			})
		}
	}
}

// rawStorer adds brokertest.RawStorer to a sharded driver: it stores the
// values in one partition of the queue, as its inner driver's Enqueue
// stores messages: a list's ready list (the first partition's), or a
// stream that exists already (the first partition whose stream does).
type rawStorer struct {
	*shard.Driver
	rdb    redis.UniversalClient
	prefix string
	driver string
}

func (d rawStorer) StoreRaw(ctx context.Context, queue string, values ...[]byte) error {
	k := keys.Queue(d.prefix, d.Partitions(queue)[0])
	for _, p := range d.Partitions(queue) {
		if d.driver == "stream" && d.rdb.Exists(ctx, keys.Queue(d.prefix, p).Part("stream")).Val() == 1 {
			k = keys.Queue(d.prefix, p)
			break
		}
	}
	if d.driver == "list" {
		args := make([]any, len(values))
		for i, v := range values {
			args[i] = v
		}
		return d.rdb.LPush(ctx, k.Part("ready"), args...).Err()
	}
	p := d.rdb.Pipeline()
	for _, v := range values {
		p.XAdd(ctx, &redis.XAddArgs{Stream: k.Part("stream"), NoMkStream: true, Values: []any{"m", v}})
	}
	_, err := p.Exec(ctx)
	return err
}
