package list

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// Driver is the list driver: an at-least-once, FIFO broker.Driver on Redis
// lists with leases. It is safe for concurrent use.
type Driver struct {
	client redis.UniversalClient
	cfg    Config
	log    *slog.Logger

	// queueKeys caches the key names of queues in use, so the hot paths do
	// not rebuild them; capped so that arbitrary queue names cannot grow it
	// without bound.
	keyCache sync.Map // string -> *queueKeys
	keyCount atomic.Int64
	// reg remembers the queues this driver added to the registry, so that
	// only a queue's first enqueue or Open sends the SADD.
	reg *registry.Registry
	// wait, when Config.WaitReplicas is set, sends enqueues that wait for
	// replicas.
	wait *replicas.Waiter

	*timers.Methods    // broker.Timers, see timers.go
	*discards.Keeper   // broker.Discards, see discards.go
	*records.Records   // broker.Records
	*inspect.Inspector // broker.Inspector, see inspect.go
	*workers.Registry  // broker.WorkerRegistry
	*pause.Pauser      // broker.Pauser
}

var _ broker.Driver = (*Driver)(nil)

// New returns a driver on client. cfg may be nil.
func New(client redis.UniversalClient, cfg *Config) (*Driver, error) {
	if client == nil {
		return nil, fmt.Errorf("list: nil redis client")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	wait, err := replicas.New(client, c.WaitReplicas, c.WaitTimeout)
	if err != nil {
		return nil, fmt.Errorf("list: config: %w", err)
	}
	topology.Watch(client) // a Cluster client finds a failed master's successor
	d := &Driver{client: client, cfg: c, log: c.Logger, reg: registry.New(c.Prefix, "list", c.Logger), wait: wait}
	d.Methods = d.timerMethods()
	d.Keeper = d.discardKeeper()
	d.Records = &records.Records{Name: "list", Client: client, Prefix: c.Prefix, Max: c.RecordMax}
	d.Inspector = d.inspector()
	d.Registry = workers.New(client, c.Prefix)
	d.Pauser = pause.New(client, c.Prefix)
	return d, nil
}

// Capabilities reports what the list driver promises.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{AtLeastOnce: true, FIFO: true, Delay: true, Extend: true, Discard: true, Pause: true, Keep: true, Cancel: true, Records: true, Groups: true, Limits: true, History: true}
}

// Open returns a consumer of queue. Its only I/O is adding queue to the
// registry (one SADD) the first time this driver opens or enqueues to it;
// a failure there is logged, and does not keep the consumer from opening.
func (d *Driver) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, fmt.Errorf("list: open: %w", err)
	}
	vt := opts.VisibilityTimeoutOrDefault()
	if vt < time.Millisecond {
		return nil, fmt.Errorf("list: open: visibility timeout %v is under 1ms", vt)
	}
	d.reg.Ensure(ctx, d.client, queue) // a failure is logged: the registry only serves the Inspector
	return newConsumer(d, queue, opts), nil
}

const maxCachedQueues = 1024

// keys returns the key names of queue.
func (d *Driver) keys(queue string) *queueKeys {
	if k, ok := d.keyCache.Load(queue); ok {
		return k.(*queueKeys)
	}
	k := newQueueKeys(d.cfg.Prefix, queue)
	if d.keyCount.Load() < maxCachedQueues {
		if _, loaded := d.keyCache.LoadOrStore(queue, k); !loaded {
			d.keyCount.Add(1)
		}
	}
	return k
}

// queueKeys holds the keys of one queue, and the KEYS list of each script,
// built once (go-redis copies them into each command).
type queueKeys struct {
	ready, wake, lease, inflight, reclaimed, canceled, cancels, delayed, dead, dropped, expired, stats, paused, keeper, heir, history string
	timers                                                                                                                            timers.Keys
	discards                                                                                                                          discards.Keys
	records                                                                                                                           records.Keys
	groups                                                                                                                            groups.Keys
	limits                                                                                                                            limits.Keys
	promoteTo                                                                                                                         timers.Target

	enqueue, fetch, ack, ackRecord, retry, release, discard, extend, reap, cancel []string

	// backlog: the last plain push found ready holding jobs (see push).
	backlog atomic.Bool
}

// newQueueKeys lays out a queue's keys; docs/redis-keys.md describes them.
func newQueueKeys(prefix, queue string) *queueKeys {
	q := keys.Queue(prefix, queue)
	k := &queueKeys{
		ready:     q.Part("ready"),
		wake:      q.Part("wake"),
		keeper:    q.Part("keeper"),
		heir:      q.Part("keeper_heir"),
		lease:     q.Part("lease"),
		inflight:  q.Part("inflight"),
		reclaimed: q.Part("reclaimed"),
		canceled:  cancels.Marks(prefix, queue),
		cancels:   cancels.Channel(prefix, queue),
		stats:     q.Part("stats"),
		paused:    pause.Key(prefix, queue),
		timers:    timers.QueueKeys(prefix, queue),
		discards:  discards.QueueKeys(prefix, queue),
		records:   records.QueueKeys(prefix, queue),
		groups:    groups.QueueKeys(prefix, queue),
		limits:    limits.QueueKeys(prefix, queue),
		history:   history.Key(prefix, queue),
	}
	g, l := k.groups.List(), k.limits.List()
	k.dead, k.dropped, k.expired = k.discards.Dead, k.discards.Dropped, k.discards.Expired
	k.delayed = k.timers.Delayed
	k.promoteTo = timers.Target{Key: k.ready, Wake: k.wake}
	k.enqueue = slices.Concat([]string{k.ready, k.delayed, k.lease, k.timers.Timers, k.wake}, g)
	k.fetch = slices.Concat([]string{k.ready, k.lease, k.inflight, k.dead, k.dropped, k.expired, k.reclaimed, k.wake, k.canceled}, g, l)
	settled := []string{k.lease, k.inflight, k.stats, k.reclaimed}
	k.ack = slices.Concat(settled, []string{k.ready, k.wake}, l)
	k.retry = slices.Concat([]string{k.ready, k.lease, k.inflight, k.delayed, k.timers.Timers, k.stats, k.reclaimed, k.wake, k.canceled}, g, l)
	k.release = slices.Concat([]string{k.ready, k.lease, k.inflight, k.reclaimed, k.wake, k.canceled}, g, l)
	k.ackRecord = slices.Concat(settled, k.records.List(), []string{k.ready, k.wake}, g, l)
	k.discard = slices.Concat([]string{k.lease, k.inflight, k.dead, k.dropped, k.expired, k.stats, k.reclaimed}, k.records.List(), []string{k.ready, k.wake}, g, l)
	k.extend = []string{k.lease, k.canceled}
	k.reap = slices.Concat([]string{k.ready, k.lease, k.inflight, k.dead, k.dropped, k.expired, k.reclaimed, k.wake, k.canceled}, g, l)
	k.cancel = slices.Concat([]string{k.ready, k.inflight, k.canceled, k.wake}, g, l)
	return k
}
