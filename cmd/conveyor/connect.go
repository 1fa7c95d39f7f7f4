package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/queueprobe"
)

// errNotFound marks a queue, job or timer that is not there: exit status 1
// with the error's one line.
var errNotFound = errors.New("not found")

// conn is a command's connection: a Redis client and the two durable
// drivers on it, each with its Inspector (queueprobe.Set).
type conn struct {
	rdb *redis.Client
	t   *target
	*queueprobe.Set
}

// dial opens a client on t's Redis and checks that it answers. Commands
// are not retried on a network error: a re-drive or purge whose reply was
// lost would otherwise run a step twice; the operator sees the error and
// runs the command again.
func (t *target) dial(ctx context.Context) (*redis.Client, error) {
	opts, err := redis.ParseURL(t.redisURL)
	if err != nil {
		return nil, err // checked at parse time
	}
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	opts.DialTimeout = 5 * time.Second
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	return rdb, nil
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

// quietLog drops go-redis's own log lines (a failed dial): the command's
// error says what went wrong, in one line.
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
