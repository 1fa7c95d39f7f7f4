package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/pause"
	"github.com/conveyorq/conveyor/internal/registry"
)

// errNotFound marks a queue, job or timer that is not there: exit status 1
// with the error's one line.
var errNotFound = errors.New("not found")

// errPassDriver ends the errors of a queue whose driver the CLI cannot
// tell or was told wrong: a usage error (exit status 2).
var errPassDriver = errors.New("pass -driver list or -driver stream")

// conn is a command's connection: a Redis client and the two durable
// drivers on it, each with its Inspector.
type conn struct {
	rdb     *redis.Client
	t       *target
	drivers map[string]broker.Driver
	insps   map[string]*conveyor.Inspector
}

// connect opens a client on t's Redis and checks that it answers. Commands
// are not retried on a network error: a re-drive or purge whose reply was
// lost would otherwise run a step twice; the operator sees the error and
// runs the command again.
func (t *target) connect(ctx context.Context) (*conn, error) {
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
	// Reads must change nothing: a driver enforces its discard records'
	// maximum age on every read, and the CLI does not know the apps'
	// setting, so its drivers keep records whatever their age and leave
	// retention to the apps' own.
	ld, err := list.New(rdb, &list.Config{Prefix: t.prefix, DiscardMaxAge: -1})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	sd, err := stream.New(rdb, &stream.Config{Prefix: t.prefix, Group: t.group, DiscardMaxAge: -1})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	c := &conn{rdb: rdb, t: t, drivers: map[string]broker.Driver{"list": ld, "stream": sd}, insps: map[string]*conveyor.Inspector{}}
	for name, d := range c.drivers {
		if c.insps[name], err = conveyor.NewInspector(d, nil); err != nil {
			_ = rdb.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *conn) close() { _ = c.rdb.Close() }

// quietLog drops go-redis's own log lines (a failed dial): the command's
// error says what went wrong, in one line.
type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

// queueProbe is what a queue's keys say about it.
type queueProbe struct {
	queue string
	// driver is "list" or "stream" when the keys say which, "" when the
	// queue holds nothing of either's own (only timers, discard records,
	// counters: both drivers keep those alike).
	driver string
	// known: the queue is in the registry or has keys.
	known  bool
	paused bool
}

// probe reads what the keys of queues say about them, in one round trip
// of O(1) commands: the registry's SISMEMBER, the TYPE of the stream
// driver's {q}:stream and of the list driver's {q}:ready, EXISTS of the
// list driver's {q}:lease, of {q}:paused, and of the keys both drivers
// keep ({q}:delayed, {q}:dead, {q}:stats).
func (c *conn) probe(ctx context.Context, queues ...string) ([]queueProbe, error) {
	type reads struct {
		member                *redis.BoolCmd
		streamType, readyType *redis.StatusCmd
		lease, paused, shared *redis.IntCmd
	}
	rs := make([]reads, len(queues))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range queues {
			qk := keys.Queue(c.t.prefix, q)
			rs[k] = reads{
				member:     p.SIsMember(ctx, registry.Key(c.t.prefix), q),
				streamType: p.Type(ctx, qk.Part("stream")),
				readyType:  p.Type(ctx, qk.Part("ready")),
				lease:      p.Exists(ctx, qk.Part("lease")),
				paused:     p.Exists(ctx, pause.Key(c.t.prefix, q)),
				shared:     p.Exists(ctx, qk.Part("delayed"), qk.Part("dead"), qk.Part("stats")),
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the queues' keys: %w", err)
	}
	out := make([]queueProbe, len(queues))
	for k, r := range rs {
		isStream := r.streamType.Val() == "stream"
		isList := r.readyType.Val() == "list" || r.lease.Val() > 0
		p := queueProbe{queue: queues[k], paused: r.paused.Val() > 0}
		switch {
		case isStream && isList:
			return nil, fmt.Errorf("queue %q has keys of both the list and the stream driver: %w", queues[k], errPassDriver)
		case isStream:
			p.driver = "stream"
		case isList:
			p.driver = "list"
		}
		p.known = r.member.Val() || p.driver != "" || p.paused || r.shared.Val() > 0
		out[k] = p
	}
	return out, nil
}

// driverOf returns the driver to use for the queue p describes: -driver
// when given (refused when the keys say otherwise), else the one its keys
// say. A queue whose keys do not say is read alike by both, so reads use
// the list driver; write says the command stores jobs in the ready
// structure, which differs: it then needs -driver.
func (c *conn) driverOf(p queueProbe, write bool) (string, error) {
	switch {
	case c.t.driver != "" && p.driver != "" && c.t.driver != p.driver:
		return "", fmt.Errorf("queue %q is a %s queue (its keys say so), not %s: %w, or leave it out", p.queue, p.driver, c.t.driver, errPassDriver)
	case c.t.driver != "":
		return c.t.driver, nil
	case p.driver != "":
		return p.driver, nil
	case write:
		return "", fmt.Errorf("the keys of queue %q do not say which driver it uses (it holds no ready or in-flight jobs): %w", p.queue, errPassDriver)
	}
	return "list", nil
}

// queue probes one queue and returns the Inspector of its driver. A queue
// that is neither in the registry nor has keys is not found, unless
// mayBeNew (enqueue makes it).
func (c *conn) queue(ctx context.Context, queue string, write, mayBeNew bool) (*conveyor.Inspector, queueProbe, error) {
	ps, err := c.probe(ctx, queue)
	if err != nil {
		return nil, queueProbe{}, err
	}
	p := ps[0]
	if !p.known && !mayBeNew {
		return nil, p, fmt.Errorf("queue %q %w under prefix %q: no process has used it (check the name and -prefix)", queue, errNotFound, c.t.prefix)
	}
	name, err := c.driverOf(p, write)
	if err != nil {
		return nil, p, err
	}
	p.driver = name
	return c.insps[name], p, nil
}
