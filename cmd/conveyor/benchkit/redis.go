package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// DeleteKeys removes every key matching pattern (a SCAN MATCH pattern), on
// every master of a cluster. It never flushes a database.
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	del := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := c.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			return c.Unlink(ctx, batch...).Err()
		}
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// UNLINK of keys in different slots is refused by a cluster; the
		// client splits nothing, so each key goes alone.
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				if err := n.Unlink(ctx, iter.Val()).Err(); err != nil {
					return err
				}
			}
			return iter.Err()
		})
	} else {
		err = del(ctx, rdb)
	}
	if err != nil {
		return fmt.Errorf("benchkit: delete %s: %w", pattern, err)
	}
	return nil
}

// AnyKey reports whether some key matches pattern.
func AnyKey(ctx context.Context, rdb redis.UniversalClient, pattern string) (bool, error) {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return false, fmt.Errorf("benchkit: scan %s: %w", pattern, err)
		}
		if len(keys) > 0 {
			return true, nil
		}
		if next == 0 {
			return false, nil
		}
		cursor = next
	}
}

// UsedMemory returns the server's used_memory from INFO memory, in bytes.
func UsedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	s, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("benchkit: INFO memory: %w", err)
	}
	return infoField(s, "used_memory")
}

// infoField reads an integer field of an INFO reply.
func infoField(info, field string) (int64, error) {
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("benchkit: INFO field %s: %w", field, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("benchkit: INFO has no field %s", field)
}

// ServerVersion returns redis_version from INFO server.
func ServerVersion(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	s, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("benchkit: INFO server: %w", err)
	}
	for line := range strings.Lines(s) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// commandCounter is a go-redis hook counting the commands a client sends,
// each command of a pipeline apart. A blocking command counts once, when
// it is sent, whatever it waits.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// RedisOptions turns a redis:// URL into client options with enough
// connections for concurrency goroutines and a pool of that size at once.
func RedisOptions(url string, concurrency int) (*redis.UniversalOptions, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("benchkit: redis URL: %w", err)
	}
	return &redis.UniversalOptions{
		Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password,
		TLSConfig: o.TLSConfig, PoolSize: max(64, concurrency+16),
	}, nil
}

// RandomPrefix returns a key prefix for one run, cvbench-<8 hex digits>.
func RandomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "cvbench-" + hex.EncodeToString(b[:])
}
