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
	"fmt"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redischeck"
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

// Do writes to the masters that hold keys, waiting for replicas on each:
// keys[i] is a key of the i-th part of the write (all its keys share that
// key's hash slot), and write is called once per master, on one connection
// of it, with the indexes of the parts that master holds (every part on a
// single Redis). Each call is followed by WAIT on its connection. Do
// returns the writes' errors, joined with a *broker.ReplicationError for
// each master fewer replicas than asked for acknowledged in time. The wait
// runs after a failed write too, since a write that failed in part (a
// duplicate refused among stored jobs) stored the rest; it is skipped when
// the connection broke.
func (w *Waiter) Do(ctx context.Context, keys []string, write func(c script.Client, parts []int) error) error {
	var (
		order []*redis.Client
		parts = map[*redis.Client][]int{}
		errs  *multierror.Error
	)
	for i, k := range keys {
		node, err := w.master(ctx, k)
		if err != nil {
			errs = multierror.Append(errs, err)
			continue
		}
		if _, ok := parts[node]; !ok {
			order = append(order, node)
		}
		parts[node] = append(parts[node], i)
	}
	for _, node := range order {
		if err := w.one(ctx, node, parts[node], write); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	if errs != nil && len(errs.Errors) == 1 {
		return errs.Errors[0]
	}
	return errs.ErrorOrNil()
}

// one runs write and WAIT on one connection of node.
func (w *Waiter) one(ctx context.Context, node *redis.Client, parts []int, write func(c script.Client, parts []int) error) error {
	conn := node.Conn()
	defer conn.Close()
	werr := write(conn, parts)
	if werr != nil && script.Unsure(werr) {
		// The connection broke or timed out: WAIT on it would only fail
		// too, and a Cluster client must learn the new layout.
		w.stale(ctx)
		return werr
	}
	if err := w.wait(ctx, conn); err != nil {
		if werr == nil {
			return err
		}
		return multierror.Append(werr, err)
	}
	if werr != nil && topology.Stale(werr) {
		w.stale(ctx)
	}
	return werr
}

// wait sends WAIT on conn and maps a short count to a
// *broker.ReplicationError.
func (w *Waiter) wait(ctx context.Context, conn *redis.Conn) error {
	got, err := conn.Wait(ctx, w.n, w.timeout).Result()
	if err != nil {
		w.stale(ctx)
		return fmt.Errorf("conveyor: wait for %d replicas: %w", w.n, err)
	}
	if int(got) < w.n {
		return &broker.ReplicationError{Acked: int(got), Wanted: w.n}
	}
	return nil
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
	if c, ok := w.client.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
}
