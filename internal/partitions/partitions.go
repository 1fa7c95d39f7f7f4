// Package partitions records the partition count of a sharded queue
// (broker/shard) for the list and stream drivers, in the key
// <prefix>:{<queue>}:partitions: a STRING holding the count in decimal,
// written once, on the queue's first use, and kept (no TTL) until the queue
// is deleted. A shard.Driver configured with another count refuses the
// queue, since its jobs would be routed to other partitions than their
// group's or unique key's earlier jobs.
//
//	n, err := partitions.Record(ctx, rdb, prefix, "orders", 8)
//
// docs/redis-keys.md describes the key.
package partitions

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Max is the most partitions a queue may have (shard.MaxPartitions).
const Max = 1024

// Key returns the key holding queue's partition count.
func Key(prefix, queue string) string { return keys.Queue(prefix, queue).Part("partitions") }

// Record records n as queue's partition count unless a count is recorded
// already, and returns the recorded count: one SET key n NX GET (Redis
// 7.0), which sets the key only when it is missing and replies with the
// value it held, so that of two processes recording different counts at
// once both learn the one that was set first. A recorded value that is not
// a positive integer in decimal is an error naming the key.
func Record(ctx context.Context, rdb redis.Cmdable, prefix, queue string, n int) (int, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("record partitions: %w", err)
	}
	if n < 1 || n > Max {
		return 0, fmt.Errorf("record partitions: count %d, want 1 to %d", n, Max)
	}
	key := Key(prefix, queue)
	old, err := rdb.SetArgs(ctx, key, n, redis.SetArgs{Mode: "NX", Get: true}).Result()
	if errors.Is(err, redis.Nil) {
		return n, nil
	}
	if err != nil {
		return 0, fmt.Errorf("record partitions: SET %s NX GET: %w", key, err)
	}
	got, err := strconv.Atoi(old)
	if err != nil || got < 1 || strconv.Itoa(got) != old {
		return 0, fmt.Errorf("record partitions: %s holds %q, not a partition count (a positive integer)", key, old)
	}
	return got, nil
}
