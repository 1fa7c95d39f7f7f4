package stream

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/cancels"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/history"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/limits"
	"github.com/conveyorq/conveyor/internal/pause"
	"github.com/conveyorq/conveyor/internal/records"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/replicas"
	"github.com/conveyorq/conveyor/internal/timers"
	"github.com/conveyorq/conveyor/internal/topology"
	"github.com/conveyorq/conveyor/internal/workers"
)

// Driver is the stream driver: each queue is a Redis stream read through a
// consumer group. It implements broker.Driver and is safe for concurrent use.
type Driver struct {
	rdb redis.UniversalClient
	cfg Config
	// reg remembers the queues this driver added to the registry, so that
	// only a queue's first enqueue or Open sends the SADD.
	reg *registry.Registry
	// wait, when Config.WaitReplicas is set, sends enqueues that wait for
	// replicas.
	wait *replicas.Waiter

	reclaimed      atomic.Int64
	deletedPending atomic.Int64
	released       atomic.Int64
	poisoned       atomic.Int64
	// minVT is the shortest visibility timeout (ns) of the consumers this
	// driver opened: the idle time after which Upkeep looks for expired
	// leases (0: none opened, broker.DefaultVisibilityTimeout).
	minVT atomic.Int64

	*timers.Methods    // broker.Timers, see timers.go
	*discards.Keeper   // broker.Discards, see discards.go
	*records.Records   // broker.Records
	*inspect.Inspector // broker.Inspector, see inspect.go
	*workers.Registry  // broker.WorkerRegistry
	*pause.Pauser      // broker.Pauser
}

var _ broker.Driver = (*Driver)(nil)

// New returns a driver using rdb (a single Redis, Sentinel or Cluster
// client). cfg may be nil for the defaults.
func New(rdb redis.UniversalClient, cfg *Config) (*Driver, error) {
	if rdb == nil {
		return nil, fmt.Errorf("stream: new: nil redis client")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	wait, err := replicas.New(rdb, c.WaitReplicas, c.WaitTimeout)
	if err != nil {
		return nil, fmt.Errorf("stream: config: %w", err)
	}
	topology.Watch(rdb) // a Cluster client finds a failed master's successor
	d := &Driver{rdb: rdb, cfg: c, reg: registry.New(c.Prefix, "stream", c.Logger), wait: wait}
	d.Methods = d.timerMethods()
	d.Keeper = d.discardKeeper()
	// Before the Inspector, which serves the records too (JobFinished).
	d.Records = &records.Records{Name: "stream", Client: rdb, Prefix: c.Prefix, Max: c.RecordMax}
	d.Inspector = d.inspector()
	d.Registry = workers.New(rdb, c.Prefix)
	d.Pauser = pause.New(rdb, c.Prefix)
	return d, nil
}

// Capabilities reports what the stream driver promises.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{
		AtLeastOnce: true,
		FIFO:        true,
		Delay:       true,
		Extend:      true,
		Discard:     true,
		Pause:       true,
		Keep:        true,
		Cancel:      true,
		Records:     true,
		Groups:      true,
		Limits:      true,
		History:     true,
	}
}

// Open returns a consumer of queue with a name of its own in the group. Its
// only I/O is adding queue to the registry (one SADD) the first time this
// driver opens or enqueues to it; a failure there is logged, and does not
// keep the consumer from opening.
func (d *Driver) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, fmt.Errorf("stream: open: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("stream: open: %w", err)
	}
	d.reg.Ensure(ctx, d.rdb, queue) // a failure is logged: the registry only serves the Inspector
	c := newConsumer(d, queue, opts)
	for v := d.minVT.Load(); v == 0 || int64(c.vt) < v; v = d.minVT.Load() {
		if d.minVT.CompareAndSwap(v, int64(c.vt)) {
			break
		}
	}
	return c, nil
}

// Stats counts what the driver's consumers met since New.
type Stats struct {
	// Reclaimed counts entries taken over after their lease expired (the
	// consumer holding them crashed or stalled).
	Reclaimed int64
	// DeletedWhilePending counts entries found pending in the group but gone
	// from the stream (deleted or trimmed by hand): XAUTOCLAIM dropped them
	// from the pending list and the driver logged their IDs at Warn. Their
	// messages are lost; this should stay 0.
	DeletedWhilePending int64
	// Released counts deliveries handed back at once because Fetch read them
	// after its caller had given up (context done or consumer closed), or
	// because the reply of the read was lost (the connection broke after
	// Redis ran it): the consumer's next fetch hands back the entries
	// pending for it that it never handed out, with no recovery counted.
	Released int64
	// Poisoned counts messages moved to the discard list because their
	// lease expired Config.MaxRecoveries times (see DESIGN invariant 3):
	// they would most likely take down the next worker too. The driver logs
	// their entry and message IDs at Warn. They are not counted in
	// Reclaimed, as they were not delivered again.
	Poisoned int64
}

// Stats returns the driver's counters.
func (d *Driver) Stats() Stats {
	return Stats{
		Reclaimed:           d.reclaimed.Load(),
		DeletedWhilePending: d.deletedPending.Load(),
		Released:            d.released.Load(),
		Poisoned:            d.poisoned.Load(),
	}
}

// queueKeys holds the keys of one queue.
type queueKeys struct {
	stream, wake, reclaim, delayed, dead, deadDropped, deadExpired, stats, prune, reclaimed, paused, keeper, heir, history string
	// canceled is the ZSET of marks of cancelled deliveries, cancels the
	// channel their job IDs are published on (internal/cancels).
	canceled, cancels string
	timers            timers.Keys
	discards          discards.Keys
	records           records.Keys
	groups            groups.Keys
	limits            limits.Keys
}

func (d *Driver) keys(queue string) queueKeys {
	k := keys.Queue(d.cfg.Prefix, queue)
	t := timers.QueueKeys(d.cfg.Prefix, queue)
	dk := discards.QueueKeys(d.cfg.Prefix, queue)
	return queueKeys{stream: k.Part("stream"), delayed: t.Delayed, dead: dk.Dead, deadDropped: dk.Dropped, deadExpired: dk.Expired,
		stats: k.Part("stats"), prune: k.Part("prune"), reclaimed: k.Part("reclaimed"),
		keeper: k.Part("keeper"), heir: k.Part("keeper_heir"), wake: k.Part("wake"), reclaim: k.Part("reclaim"),
		paused: pause.Key(d.cfg.Prefix, queue), canceled: cancels.Marks(d.cfg.Prefix, queue), cancels: cancels.Channel(d.cfg.Prefix, queue),
		timers: t, discards: dk, records: records.QueueKeys(d.cfg.Prefix, queue), groups: groups.QueueKeys(d.cfg.Prefix, queue),
		limits: limits.QueueKeys(d.cfg.Prefix, queue), history: history.Key(d.cfg.Prefix, queue)}
}
