// Package replicas makes a driver's writes wait for replicas: the write
// goes on one connection of the master that holds its keys, followed on
// the same connection by WAIT, so that a nil error means the replicas
// asked for have the write and a failover to one of them keeps it.
//
// Redis replicates asynchronously: without a wait, a write the master
// acknowledged and had not yet sent to a replica is lost when that replica
// is promoted. WAIT closes that window for the writes it covers at the cost
// of a replication round trip per call (a fraction of a millisecond on one
// host, a network round trip between hosts) and one connection held for
// the call. It does not make Redis strongly consistent: a write WAIT timed
// out on is stored on the master and reported as a
// *broker.ReplicationError, and a failover then may or may not keep it.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/topology"
)

// DefaultTimeout bounds a wait when the driver's configuration does not.
const DefaultTimeout = time.Second

// Waiter sends writes that wait for replicas. A nil *Waiter is not used:
// drivers configured without replicas write as usual.
type Waiter struct {
	client  redis.UniversalClient
	n       int
	timeout time.Duration
}

// New returns a Waiter for client that waits for n replicas, timeout at
// most (DefaultTimeout when 0); nil when n is 0. client must be a single
// Redis (or Sentinel) client or a Cluster client: a Ring's writes have no
// replicas to wait for.
func New(client redis.UniversalClient, n int, timeout time.Duration) (*Waiter, error) {
	var errs *multierror.Error
	if n < 0 {
		errs = multierror.Append(errs, fmt.Errorf("WaitReplicas %d is negative", n))
	}
	if timeout < 0 {
		errs = multierror.Append(errs, fmt.Errorf("WaitTimeout %v is negative", timeout))
	} else if timeout > 0 && timeout < time.Millisecond {
		errs = multierror.Append(errs, fmt.Errorf("WaitTimeout %v is under a millisecond, WAIT's unit", timeout))
	}
	if err := errs.ErrorOrNil(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return nil, fmt.Errorf("WaitReplicas needs a *redis.Client (single or Sentinel) or a *redis.ClusterClient, not a %T", client)
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &Waiter{client: client, n: n, timeout: timeout}, nil
}

// Needs adds WAIT to what a driver's Check asks the server to allow,
// when w waits (a nil w adds nothing).
func (w *Waiter) Needs(needs []redischeck.Need) []redischeck.Need {
	if w == nil {
		return needs
	}
	return append(needs, redischeck.Command("WAIT", "1", "0"))
}

// Part is one queue's share of a write: Key is one of its keys (all the
// keys the write touches for it share Key's hash slot).
type Part struct {
	Queue string
	Key   string
}

// Do writes to the masters that hold parts, waiting for replicas on each:
// write is called once per master, on one connection of it, with the
// indexes of the parts that master holds (every part, on a single Redis),
// and is followed by WAIT on that connection. Masters are written and
// waited for one after another, so a wait can take WaitTimeout per master.
// Do returns the writes' errors, and for each part of a master that fewer
// replicas than asked for acknowledged in time (or whose WAIT failed) a
// *broker.QueueError naming the part's queue and wrapping a
// *broker.ReplicationError. The wait runs after a write that failed too,
// since a write refused in part (a duplicate among stored jobs) stored the
// rest; only a connection that broke is not waited on.
//
// A write goes to the master the client's slot map names and is not
// redirected: during a slot migration, a write to a moving slot fails with
// the node's MOVED or ASK reply (nothing stored), and the map is reloaded
// for the next call.
func (w *Waiter) Do(ctx context.Context, parts []Part, write func(c script.Client, parts []int) error) error {
	var (
		order []*redis.Client
		held  = map[*redis.Client][]int{}
		errs  *multierror.Error
		lost  error // the slot map could not be read: said once
	)
	for i, p := range parts {
		node, err := w.master(ctx, p.Key)
		if err != nil {
			if lost == nil {
				lost = err
				errs = multierror.Append(errs, err)
			}
			continue
		}
		if _, ok := held[node]; !ok {
			order = append(order, node)
		}
		held[node] = append(held[node], i)
	}
	for _, node := range order {
		werr, rerr := w.one(ctx, node, held[node], write)
		if werr != nil {
			errs = multierror.Append(errs, werr)
		}
		if rerr != nil {
			for _, i := range held[node] {
				errs = multierror.Append(errs, &broker.QueueError{Queue: parts[i].Queue, Err: rerr})
			}
		}
	}
	if errs != nil && len(errs.Errors) == 1 {
		return errs.Errors[0]
	}
	return errs.ErrorOrNil()
}

// Enqueue stores msgs (validated; one queue or several) and waits for
// replicas to have them: each queue joins reg apart first (the registry's
// key may live on another master), then write stores the messages of each
// master's queues on one connection of it (single: the call is for one
// queue, not one of several, so that each queue's refusal of a batch still
// names it) and Do waits. key returns a key of a queue, for its slot.
func (w *Waiter) Enqueue(ctx context.Context, msgs []*broker.Message, reg *registry.Registry, key func(queue string) string,
	write func(c script.Client, msgs []*broker.Message, single bool) error) error {
	batches := broker.GroupByQueue(msgs)
	parts := make([]Part, len(batches))
	for i, b := range batches {
		reg.Ensure(ctx, w.client, b[0].Queue)
		parts[i] = Part{Queue: b[0].Queue, Key: key(b[0].Queue)}
	}
	return w.Do(ctx, parts, func(c script.Client, held []int) error {
		var part []*broker.Message
		for _, i := range held {
			part = append(part, batches[i]...)
		}
		return write(c, part, len(batches) == 1)
	})
}

// one runs write and WAIT on one connection of node, and returns the
// write's error and the wait's (a *broker.ReplicationError).
func (w *Waiter) one(ctx context.Context, node *redis.Client, parts []int, write func(c script.Client, parts []int) error) (werr, rerr error) {
	conn := node.Conn()
	defer conn.Close()
	werr = write(conn, parts)
	if werr != nil && topology.Stale(werr) {
		w.stale(ctx)
	}
	if werr != nil && broken(werr) {
		// WAIT on a broken connection would only fail too.
		return werr, nil
	}
	return werr, w.wait(ctx, conn)
}

// wait sends WAIT on conn and maps a short count, or a WAIT that failed
// after the write, to a *broker.ReplicationError.
func (w *Waiter) wait(ctx context.Context, conn *redis.Conn) error {
	got, err := conn.Wait(ctx, w.n, w.timeout).Result()
	if err != nil {
		if topology.Stale(err) {
			w.stale(ctx)
		}
		return &broker.ReplicationError{Wanted: w.n, Err: err}
	}
	if int(got) < w.n {
		return &broker.ReplicationError{Acked: int(got), Wanted: w.n}
	}
	return nil
}

// broken reports whether err says the connection itself failed (it could
// not be made, broke, or timed out) rather than that Redis answered:
// a refused duplicate or a full queue leaves the connection usable.
func broken(err error) bool {
	return topology.Unreachable(err) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// master returns the client of the master holding key.
func (w *Waiter) master(ctx context.Context, key string) (*redis.Client, error) {
	switch c := w.client.(type) {
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("conveyor: find the master of %q: %w", key, err)
		}
		return node, nil
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("conveyor: cannot wait for replicas with a %T", w.client)
}

// stale asks a Cluster client to reload the slot layout: a write sent
// straight to a node does not teach the client that the node failed or
// lost its slots, as the client's own calls would.
func (w *Waiter) stale(ctx context.Context) {
	if ctx.Err() != nil {
		return // the caller's deadline, not the node's failure
	}
	if c, ok := w.client.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
}
