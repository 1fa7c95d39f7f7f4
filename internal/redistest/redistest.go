// Package redistest connects tests to a real Redis and gives each test its
// own key prefix, removed when the test ends. It never flushes a database.
//
// CONVEYOR_TEST_REDIS_URL selects the server (default
// redis://127.0.0.1:6379/0). CONVEYOR_TEST_REDIS_CLUSTER, a comma-separated
// list of host:port seeds, selects a Redis Cluster instead. An unreachable
// server fails the test with a message saying how to start one.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultURL is used when CONVEYOR_TEST_REDIS_URL is not set.
const DefaultURL = "redis://127.0.0.1:6379/0"

// Options returns the universal options the environment selects and a
// description of the target for messages.
func Options() (*redis.UniversalOptions, string, error) {
	if seeds := os.Getenv("CONVEYOR_TEST_REDIS_CLUSTER"); seeds != "" {
		return &redis.UniversalOptions{Addrs: strings.Split(seeds, ","), IsClusterMode: true}, "cluster " + seeds, nil
	}
	url := os.Getenv("CONVEYOR_TEST_REDIS_URL")
	if url == "" {
		url = DefaultURL
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, url, err
	}
	return &redis.UniversalOptions{
		Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password,
		TLSConfig: o.TLSConfig, PoolSize: 64,
	}, url, nil
}

var (
	once    sync.Once
	shared  redis.UniversalClient
	target  string
	initErr error
)

// Client returns a client shared by the tests of the package, failing t if
// Redis is unreachable. Do not close it.
func Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	once.Do(func() {
		var opts *redis.UniversalOptions
		opts, target, initErr = Options()
		if initErr != nil {
			return
		}
		shared = redis.NewUniversalClient(opts)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		initErr = shared.Ping(ctx).Err()
	})
	if initErr != nil {
		t.Fatalf("redis at %s unreachable: %v\n"+
			"start one with `make test` (it starts a throwaway redis-server), or run\n"+
			"  redis-server --port 6379 --save '' --appendonly no --daemonize yes\n"+
			"or point CONVEYOR_TEST_REDIS_URL at a server you own (tests never flush it)", target, initErr)
	}
	return shared
}

// NewClient returns a client of its own, closed when t ends; for tests that
// need their own connection pool (blocking calls, closing it on purpose).
func NewClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	Client(t)
	opts, _, _ := Options()
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a key prefix no other test uses and deletes every key under
// it when t ends.
func Prefix(t testing.TB) string {
	t.Helper()
	c := Client(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "cvt-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, k := range AllKeys(t, c, p) {
			_ = c.Del(ctx, k).Err()
		}
	})
	return p
}

// Keys lists the keys under prefix that hold queue state, on every master
// of a cluster: every key but the bookkeeping ones the Inspector reads,
// which outlive a drained queue by design (see Bookkeeping), and drained
// streams (see DrainedStream). Tests that
// check nothing is left behind use it.
func Keys(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	all := AllKeys(t, c, prefix)
	out := all[:0]
	for _, k := range all {
		if !Bookkeeping(prefix, k) && !(strings.HasSuffix(k, "}:stream") && DrainedStream(t, c, k)) {
			out = append(out, k)
		}
	}
	return out
}

// DrainedStream reports whether the stream at key holds no entry and its
// groups nothing pending: what the stream driver leaves of a drained queue
// (it keeps the stream, with its group, so that idle consumers stay blocked
// on it).
func DrainedStream(t testing.TB, c redis.UniversalClient, key string) bool {
	t.Helper()
	ctx := context.Background()
	n, err := c.XLen(ctx, key).Result()
	if err != nil {
		t.Fatalf("XLEN %s: %v", key, err)
	}
	if n != 0 {
		return false
	}
	gs, err := c.XInfoGroups(ctx, key).Result()
	if err != nil {
		t.Fatalf("XINFO GROUPS %s: %v", key, err)
	}
	for _, g := range gs {
		if g.Pending != 0 {
			return false
		}
	}
	return true
}

// Bookkeeping reports whether key is one of the kinds of key that stay
// when every queue under prefix is drained (docs/redis-keys.md): the queue
// registry <prefix>:queues, a queue's cumulative counters
// <prefix>:{<queue>}:stats and the durable drivers' record of reclaimed
// leases <prefix>:{<queue>}:reclaimed (it expires an hour after the last
// reclaim), a queue's history <prefix>:{<queue>}:history (samples its
// keeper took, kept for their retention), a sharded queue's recorded
// partition count <prefix>:{<queue>}:partitions (broker/shard), a queue's keeper election (<prefix>:{<queue>}:keeper,
// :keeper_heir and :keeper_heir:baton, which expire within seconds: a
// killed pool's lease stays until its TTL runs out), a queue's wake signals
// <prefix>:{<queue>}:wake and :reclaim (one member each; a store racing the
// fetch that drained the queue, or a takeover no keeper asked for, may
// leave one) and the waits' own keys
// <prefix>:{<queue>}:...:cancel:<id> (a TTL of seconds), and the worker registry's index <prefix>:{workers}:index and
// entries <prefix>:{workers}:w:<id> (a killed pool's entry stays until its
// TTL runs out).
func Bookkeeping(prefix, key string) bool {
	if key == prefix+":queues" || key == prefix+":{workers}:index" {
		return true
	}
	if id, ok := strings.CutPrefix(key, prefix+":{workers}:w:"); ok && id != "" {
		return true
	}
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return false
	}
	for _, part := range []string{"}:stats", "}:reclaimed", "}:history", "}:partitions", "}:keeper", "}:keeper_heir", "}:keeper_heir:baton", "}:wake", "}:reclaim"} {
		if q, ok := strings.CutSuffix(rest, part); ok && !strings.Contains(q, "}") {
			return true
		}
	}
	if i := strings.Index(rest, "}:"); i > 0 && strings.Contains(rest[i:], ":cancel:") {
		return true
	}
	return false
}

// AllKeys lists every key under prefix, on every master of a cluster.
func AllKeys(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, n redis.Cmdable) error {
		iter := n.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatalf("scan keys under %s: %v", prefix, err)
	}
	return out
}

// IsCluster reports whether the tests run against a Redis Cluster.
func IsCluster() bool { return os.Getenv("CONVEYOR_TEST_REDIS_CLUSTER") != "" }
