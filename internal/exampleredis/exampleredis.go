// Package exampleredis gives the runnable examples of Conveyor's packages
// a Redis of their own: the one the tests use, a key prefix no other run
// uses, and a cleanup that deletes every key under it. A program makes its
// client with redis.NewClient instead.
package exampleredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Open returns a client of the Redis the examples run against, a
// key prefix no other run uses, and a cleanup func that deletes every key
// under the prefix and closes the client. A program makes its client with
// redis.NewClient and names its prefix after itself.
//
// The Redis is the one the tests use (redistest.Options):
// CONVEYOR_TEST_REDIS_URL, by default redis://127.0.0.1:6379/0, or the
// Cluster whose seeds CONVEYOR_TEST_REDIS_CLUSTER lists.
func Open() (redis.UniversalClient, string, func()) {
	opts, target, err := redistest.Options()
	if err != nil {
		log.Fatalf("%s: %v", target, err)
	}
	rdb := redis.NewUniversalClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		log.Fatalf("the examples need Redis 7+; none answers at %s: %v\n"+
			"start one with `make test` (it starts a throwaway redis-server), or run\n"+
			"  redis-server --port 6379 --save '' --appendonly no --daemonize yes\n"+
			"or point CONVEYOR_TEST_REDIS_URL at a server you own (the examples delete only their own keys)", target, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "conveyor-example-" + hex.EncodeToString(b)
	return rdb, prefix, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
			for iter.Next(ctx) {
				if err := c.Del(ctx, iter.Val()).Err(); err != nil {
					return err
				}
			}
			return iter.Err()
		}
		var err error
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, del)
		case *redis.Client:
			err = del(ctx, c)
		}
		if err != nil {
			log.Fatalf("delete the example's keys under %s: %v", prefix, err)
		}
		_ = rdb.Close()
	}
}
