package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/cmd/conveyor/benchkit"
	"github.com/conveyorq/conveyor/internal/queueprobe"
	"github.com/conveyorq/conveyor/internal/redischeck"
)

// errNotFound marks a queue, job or timer that is not there: exit status 1
// with the error's one line.
var errNotFound = errors.New("not found")

// conn is a command's connection: a Redis client and the two durable
// drivers on it, each with its Inspector (queueprobe.Set).
type conn struct {
	rdb redis.UniversalClient
	t   *target
	*queueprobe.Set
}

// dial opens a client on t's Redis and checks that it answers; when it
// does not, the error is one line naming the address, where the URL came
// from and, for a local port nothing listens on, how to start a server
// (redischeck.Unreachable). Commands are not retried on a network error: a
// re-drive or purge whose reply was lost would otherwise run a step twice;
// the operator sees the error and runs the command again.
//
// A URL with addr parameters names a Redis Cluster
// (redis://host:port?addr=host:port&addr=host:port, go-redis's cluster
// URL): the client is then a cluster client.
func (t *target) dial(ctx context.Context) (redis.UniversalClient, error) {
	if benchkit.ClusterURL(t.redisURL) {
		return t.dialCluster(ctx)
	}
	opts, err := t.parseURL()
	if err != nil {
		return nil, err
	}
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	opts.DialTimeout = 5 * time.Second
	return t.answering(ctx, redis.NewClient(opts), opts.Addr)
}

// dialCluster is dial for a Redis Cluster URL.
func (t *target) dialCluster(ctx context.Context) (redis.UniversalClient, error) {
	opts, err := t.clusterOptions()
	if err != nil {
		return nil, err
	}
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	opts.DialTimeout = 5 * time.Second
	return t.answering(ctx, redis.NewClusterClient(opts), strings.Join(opts.Addrs, ","))
}

// answering returns rdb once it answers PING; else it closes rdb and
// returns redischeck.Unreachable's one-line error naming addr and where
// the URL came from.
func (t *target) answering(ctx context.Context, rdb redis.UniversalClient, addr string) (redis.UniversalClient, error) {
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, redischeck.Unreachable(addr, t.urlFrom(os.Getenv), err)
	}
	return rdb, nil
}

// clusterOptions parses t's Redis Cluster URL; its error is one line
// naming where the URL came from, without the URL (it may hold a
// password).
func (t *target) clusterOptions() (*redis.ClusterOptions, error) {
	opts, err := redis.ParseClusterURL(t.redisURL)
	if err != nil {
		return nil, fmt.Errorf("%s is not a Redis Cluster URL (%s); want redis://host:port?addr=host:port&addr=host:port",
			t.urlFrom(os.Getenv), strings.TrimPrefix(err.Error(), "redis: "))
	}
	return opts, nil
}

// checkURL reports whether t's Redis URL parses, as one server's or, with
// addr parameters, a Redis Cluster's.
func (t *target) checkURL() error {
	if benchkit.ClusterURL(t.redisURL) {
		_, err := t.clusterOptions()
		return err
	}
	_, err := t.parseURL()
	return err
}

// parseURL parses t's Redis URL; its error is one line naming where the
// URL came from and what a Redis URL looks like (redischeck.ParseURL):
//
//	REDIS_URL "notaurl" is not a Redis URL: want redis://host:port/db or rediss://host:port/db
func (t *target) parseURL() (*redis.Options, error) {
	return redischeck.ParseURL(t.redisURL, t.urlFrom(os.Getenv))
}

// urlFrom names where t's Redis URL came from, for messages: REDIS_URL
// when it is that variable's value (target.flags makes it -redis's
// default), "default" when it is defaultRedisURL, else -redis.
func (t *target) urlFrom(getenv func(string) string) string {
	env := getenv("REDIS_URL")
	switch {
	case env != "" && t.redisURL == env:
		return "REDIS_URL"
	case env == "" && t.redisURL == defaultRedisURL:
		return "default"
	default:
		return "-redis"
	}
}

// connect dials t's Redis and opens the drivers of t's prefix on it.
func (t *target) connect(ctx context.Context) (*conn, error) {
	rdb, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	set, err := queueprobe.New(rdb, &queueprobe.Config{Prefix: t.prefix, Group: t.group, Driver: t.driver})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &conn{rdb: rdb, t: t, Set: set}, nil
}

func (c *conn) close() { _ = c.rdb.Close() }

// quietLog drops go-redis's own log lines (a failed dial, logged once per
// attempt): the command's error says what went wrong, in one line.
// redis.SetLogger is process-global, so only main installs it; library
// packages never do, as an application's go-redis logging is its own.
type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

// queue probes one queue and returns the Inspector of its driver
// (queueprobe.Set.Open).
func (c *conn) queue(ctx context.Context, queue string, write, mayBeNew bool) (*conveyor.Inspector, queueprobe.Queue, error) {
	insp, q, err := c.Open(ctx, queue, write, mayBeNew)
	if errors.Is(err, queueprobe.ErrUnknownQueue) {
		return nil, q, fmt.Errorf("queue %q %w under prefix %q: no process has used it (check the name and -prefix)", queue, errNotFound, c.t.prefix)
	}
	return insp, q, err
}
