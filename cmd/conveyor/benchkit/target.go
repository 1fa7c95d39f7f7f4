package benchkit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/worker"
)

// Target is one job system under measurement, bound to a namespace of its
// own (a key prefix or a queue name) so that its keys can be counted and
// deleted apart from everything else on the server.
type Target interface {
	// Enqueue stores one job carrying payload; nil means it is stored.
	Enqueue(ctx context.Context, payload []byte) error
	// EnqueueMany stores one job per payload in as few round trips as the
	// system allows.
	EnqueueMany(ctx context.Context, payloads [][]byte) error
	// EnqueueAt stores one job per payload that becomes ready at at[i].
	EnqueueAt(ctx context.Context, payloads [][]byte, at []time.Time) error
	// Serve runs a worker pool of the given concurrency that calls h when
	// each job starts, until ctx is cancelled; it returns once the pool has
	// stopped.
	Serve(ctx context.Context, concurrency int, h func(payload []byte)) error
	// Close deletes every key the target wrote.
	Close(ctx context.Context) error
}

// Factory makes the Targets of one system. New gets the Redis client to use
// (the idle workload passes one that counts commands) and a namespace no
// other target uses.
type Factory struct {
	// Name labels the system in reports: "list", "stream", "asynq".
	Name string
	New  func(rdb redis.UniversalClient, namespace string) (Target, error)
}

// Drivers are the names Conveyor accepts: its durable drivers.
var Drivers = []string{"list", "stream"}

// Conveyor returns the factory of Conveyor on the named durable driver
// ("list" or "stream"): a conveyor.Client and a worker.Pool on one queue,
// with every key under the namespace as the driver's prefix.
func Conveyor(driver string) Factory { return ConveyorWaiting(driver, 0) }

// ConveyorWaiting is Conveyor with the driver's WaitReplicas set to
// replicas: each enqueue waits until that many replicas have its jobs.
func ConveyorWaiting(driver string, replicas int) Factory {
	return Factory{Name: driver, New: func(rdb redis.UniversalClient, ns string) (Target, error) {
		var (
			d   broker.Driver
			err error
		)
		switch driver {
		case "list":
			d, err = list.New(rdb, &list.Config{Prefix: ns, WaitReplicas: replicas})
		case "stream":
			d, err = stream.New(rdb, &stream.Config{Prefix: ns, WaitReplicas: replicas})
		default:
			return nil, fmt.Errorf("benchkit: unknown driver %q (want list or stream)", driver)
		}
		if err != nil {
			return nil, fmt.Errorf("benchkit: %s driver: %w", driver, err)
		}
		c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: benchQueue})
		if err != nil {
			return nil, fmt.Errorf("benchkit: client: %w", err)
		}
		return &conveyorTarget{rdb: rdb, ns: ns, d: d, c: c}, nil
	}}
}

// benchQueue is the queue every Conveyor workload uses; the namespace
// (the driver's prefix) keeps runs apart.
const benchQueue = "bench"

// benchKind is the kind of every job the workloads enqueue.
const benchKind = "bench"

type conveyorTarget struct {
	rdb redis.UniversalClient
	ns  string
	d   broker.Driver
	c   *conveyor.Client
}

func (t *conveyorTarget) Enqueue(ctx context.Context, payload []byte) error {
	_, err := t.c.Enqueue(ctx, benchKind, payload, nil)
	return err
}

func (t *conveyorTarget) EnqueueMany(ctx context.Context, payloads [][]byte) error {
	reqs := make([]conveyor.Request, len(payloads))
	for i, p := range payloads {
		reqs[i] = conveyor.Request{Kind: benchKind, Args: p}
	}
	_, err := t.c.EnqueueMany(ctx, reqs...)
	return err
}

func (t *conveyorTarget) EnqueueAt(ctx context.Context, payloads [][]byte, at []time.Time) error {
	reqs := make([]conveyor.Request, len(payloads))
	for i, p := range payloads {
		reqs[i] = conveyor.Request{Kind: benchKind, Args: p, Opts: &conveyor.EnqueueOptions{RunAt: at[i]}}
	}
	_, err := t.c.EnqueueMany(ctx, reqs...)
	return err
}

// EnqueueGrouped stores one job per payload in FIFO group groups[i]
// (conveyor.EnqueueOptions.Group).
func (t *conveyorTarget) EnqueueGrouped(ctx context.Context, payloads [][]byte, groups []string) error {
	reqs := make([]conveyor.Request, len(payloads))
	for i, p := range payloads {
		reqs[i] = conveyor.Request{Kind: benchKind, Args: p, Opts: &conveyor.EnqueueOptions{Group: groups[i]}}
	}
	_, err := t.c.EnqueueMany(ctx, reqs...)
	return err
}

func (t *conveyorTarget) Serve(ctx context.Context, concurrency int, h func([]byte)) error {
	return t.ServePrefetch(ctx, concurrency, 0, h)
}

// ServePrefetch is Serve with worker.Config.Prefetch set (0: its default).
func (t *conveyorTarget) ServePrefetch(ctx context.Context, concurrency, prefetch int, h func([]byte)) error {
	p, err := worker.NewPool(t.d, conveyor.HandlerFunc(func(_ context.Context, job *conveyor.Job) error {
		h(job.Payload)
		return nil
	}), &worker.Config{Queue: benchQueue, Concurrency: concurrency, Prefetch: prefetch})
	if err != nil {
		return fmt.Errorf("benchkit: pool: %w", err)
	}
	return p.Run(ctx)
}

func (t *conveyorTarget) Close(ctx context.Context) error {
	return DeleteKeys(ctx, t.rdb, t.ns+":*")
}
