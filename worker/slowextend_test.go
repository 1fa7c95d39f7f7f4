package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/worker"
)

// slowExtendDriver wraps a driver: its consumers' Extend calls wait for
// gate to close before they reach Redis (a Redis slow to answer one
// command), and the first one closes started. Acks that land close acked.
type slowExtendDriver struct {
	broker.Driver
	gate      chan struct{}
	started   chan struct{}
	acked     chan struct{}
	startOnce sync.Once
	ackOnce   sync.Once
}

func newSlowExtendDriver(d broker.Driver) *slowExtendDriver {
	return &slowExtendDriver{Driver: d, gate: make(chan struct{}), started: make(chan struct{}), acked: make(chan struct{})}
}

func (d *slowExtendDriver) Open(ctx context.Context, q string, o *broker.ConsumerOptions) (broker.Consumer, error) {
	c, err := d.Driver.Open(ctx, q, o)
	return &slowExtendConsumer{Consumer: c, d: d}, err
}

type slowExtendConsumer struct {
	broker.Consumer
	d *slowExtendDriver
}

func (c *slowExtendConsumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	c.d.startOnce.Do(func() { close(c.d.started) })
	<-c.d.gate // not ctx: the round trip the heartbeat waits on
	return c.Consumer.Extend(ctx, ttl, ds...)
}

func (c *slowExtendConsumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	err := c.Consumer.Ack(ctx, ds...)
	if err == nil {
		c.d.ackOnce.Do(func() { close(c.d.acked) })
	}
	return err
}

// TestSlowExtendHoldsUpNoJob: while the heartbeat waits on a lease
// extension that Redis is slow to answer, a handler that returns is acked
// and a shutdown's cancel reaches a running handler, both without waiting
// for that round trip.
func TestSlowExtendHoldsUpNoJob(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			for _, kind := range []string{"returns", "waits"} {
				if _, err := e.client.Enqueue(ctx, kind, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			d := newSlowExtendDriver(e.d)
			defer close(d.gate)
			cancelled := make(chan struct{})
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				<-d.started // an extension of both jobs is under way
				if job.Kind == "returns" {
					return nil
				}
				<-ctx.Done()
				close(cancelled)
				return ctx.Err()
			})
			p, err := worker.NewPool(d, h, &worker.Config{
				Queue: "q", Concurrency: 2, VisibilityTimeout: 10 * time.Second,
				HeartbeatInterval: 20 * time.Millisecond, ShutdownGrace: time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			drivertest.Background(t, p.Run)
			waitFor(t, "a lease extension to start", 10*time.Second, d.started)
			waitFor(t, "the returned job's ack while an extension waits on Redis", 10*time.Second, d.acked)

			shut, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			go func() { _ = p.Shutdown(shut) }()
			waitFor(t, "the shutdown's cancel to reach the running handler while an extension waits on Redis", 10*time.Second, cancelled)
		})
	}
}
