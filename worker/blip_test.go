package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/worker"
)

// blipDriver wraps a driver: its consumers fail the first failAcks Ack
// calls as if Redis were briefly out of reach, and report every Extend call
// on extends.
type blipDriver struct {
	broker.Driver
	failAcks atomic.Int32
	extends  chan struct{}
}

func (d *blipDriver) Open(ctx context.Context, q string, o *broker.ConsumerOptions) (broker.Consumer, error) {
	c, err := d.Driver.Open(ctx, q, o)
	return &blipConsumer{Consumer: c, d: d}, err
}

type blipConsumer struct {
	broker.Consumer
	d *blipDriver
}

func (c *blipConsumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	if c.d.failAcks.Add(-1) >= 0 {
		return errors.New("dial tcp 127.0.0.1:6379: connection refused (simulated)")
	}
	return c.Consumer.Ack(ctx, ds...)
}

func (c *blipConsumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	if c.d.extends != nil {
		select {
		case c.d.extends <- struct{}{}:
		default:
		}
	}
	return c.Consumer.Extend(ctx, ttl, ds...)
}

// TestAckRetriedAfterABlip: acks that fail because Redis was briefly out of
// reach are sent again, so the jobs do not come back after their lease.
func TestAckRetriedAfterABlip(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			const n = 5
			for range n {
				if _, err := e.client.Enqueue(ctx, "k", nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			d := &blipDriver{Driver: e.d}
			d.failAcks.Store(2)
			var handled atomic.Int32
			done := make(chan struct{})
			h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error {
				if handled.Add(1) == n {
					close(done)
				}
				return nil
			})
			p, err := worker.NewPool(d, h, &worker.Config{Queue: "q", Concurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			stop := drivertest.Background(t, p.Run)
			waitFor(t, "all jobs handled", 10*time.Second, done)
			stop() // Run returns only once every ack is done
			if d.failAcks.Load() >= 0 {
				t.Fatal("no ack failed: the test did not exercise the retry")
			}
			if handled.Load() != n {
				t.Fatalf("handled %d jobs, want %d", handled.Load(), n)
			}
			assertNoKeys(t, e) // every job acked, none left leased
		})
	}
}

// TestHeartbeatKeepsLongerExtend: a lease a handler extended beyond the
// visibility timeout is not cut back by the pool's heartbeat.
func TestHeartbeatKeepsLongerExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0) // list: the lease deadline is readable as a ZSET score
	ctx := context.Background()
	long, err := e.client.Enqueue(ctx, "long", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(ctx, "short", nil, nil); err != nil {
		t.Fatal(err)
	}
	d := &blipDriver{Driver: e.d, extends: make(chan struct{}, 1)}
	extended := make(chan struct{})
	shortRunning := make(chan struct{})
	finish := make(chan struct{})
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		if job.Kind == "long" {
			if err := job.Extend(ctx, time.Hour); err != nil {
				return err
			}
			close(extended)
		} else {
			close(shortRunning)
		}
		<-finish
		return nil
	})
	p, err := worker.NewPool(d, h, &worker.Config{Queue: "q", Concurrency: 2, VisibilityTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := drivertest.Background(t, p.Run)
	defer stop()
	waitFor(t, "the long job to extend its lease", 10*time.Second, extended)
	waitFor(t, "the short job to run", 10*time.Second, shortRunning)
	// Let two heartbeats pass: each extends the short job's lease.
	for range 3 {
		select {
		case <-d.extends:
		case <-time.After(10 * time.Second):
			t.Fatal("no heartbeat")
		}
	}
	members, err := e.rdb.ZRangeWithScores(ctx, keys.Queue(e.prefix, "q").Part("lease"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, z := range members {
		if !strings.Contains(z.Member.(string), long.ID) {
			continue
		}
		found = true
		left := time.Until(time.UnixMilli(int64(z.Score)))
		if left < 50*time.Minute {
			t.Fatalf("long job's lease runs out in %v after heartbeats, want about an hour", left)
		}
	}
	if !found {
		t.Fatalf("long job has no lease: %v", members)
	}
	close(finish)
}
