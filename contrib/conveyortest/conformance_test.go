package conveyortest

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/internal/keys"
)

// TestConformance runs the driver conformance suite on the in-memory
// driver, on the system clock. The suite reads and writes a discard queue's
// records in Redis (<prefix>:{<queue>}:dead), so here, and only here, the
// driver keeps its records there (redisRecords); everything else stays in
// memory, and the suite finds no other key.
func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		d, err := newDriver(nil, &redisRecords{rdb: brokertest.Client(t), prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// redisRecords keeps discard records in the key layout the suite reads
// (docs/redis-keys.md): a LIST, newest first, and two counters.
type redisRecords struct {
	rdb    redis.UniversalClient
	prefix string
}

func (r *redisRecords) key(queue, part string) string { return keys.Queue(r.prefix, queue).Part(part) }

func (r *redisRecords) push(ctx context.Context, queue, rec string) (int, error) {
	n, err := r.rdb.LPush(ctx, r.key(queue, "dead"), rec).Result()
	return int(n), err
}

func (r *redisRecords) all(ctx context.Context, queue string) ([]string, error) {
	return r.rdb.LRange(ctx, r.key(queue, "dead"), 0, -1).Result()
}

func (r *redisRecords) keepNewest(ctx context.Context, queue string, n int) error {
	if n == 0 {
		return r.rdb.Del(ctx, r.key(queue, "dead")).Err()
	}
	return r.rdb.LTrim(ctx, r.key(queue, "dead"), 0, int64(n-1)).Err()
}

func (r *redisRecords) replace(ctx context.Context, queue string, recs []string) error {
	key := r.key(queue, "dead")
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		for i := len(recs); i > 0; i -= 1000 { // oldest first, so the newest ends at the head
			chunk := recs[max(0, i-1000):i]
			args := make([]any, len(chunk))
			for j, rec := range chunk {
				args[len(chunk)-1-j] = rec
			}
			p.LPush(ctx, key, args...)
		}
		return nil
	})
	return err
}

func (r *redisRecords) add(ctx context.Context, queue, counter string, n int64) error {
	return r.rdb.IncrBy(ctx, r.key(queue, counter), n).Err()
}

func (r *redisRecords) drop(ctx context.Context, queue string) (int64, error) {
	return r.rdb.Del(ctx, r.key(queue, "dead"), r.key(queue, droppedByCount), r.key(queue, droppedByAge)).Result()
}

func (r *redisRecords) counter(ctx context.Context, queue, counter string) (int64, error) {
	n, err := r.rdb.Get(ctx, r.key(queue, counter)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}
