package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/worker"
)

// rideSpy is a driver whose consumers count the RideAcks calls they get.
type rideSpy struct {
	broker.Driver
	rides atomic.Int32
}

type rideSpyConsumer struct {
	broker.Consumer
	d *rideSpy
}

func (c rideSpyConsumer) RideAcks() { c.d.rides.Add(1) }

func (d *rideSpy) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	c, err := d.Driver.Open(ctx, queue, opts)
	if err != nil {
		return nil, err
	}
	return rideSpyConsumer{Consumer: c, d: d}, nil
}

// TestPoolLetsAcksRideOnItsOwnConsumer: a pool of one queue lets its
// consumer's acks ride in its fetches (RideAcks); a pool of several queues,
// which fetches from each in turn, does not.
func TestPoolLetsAcksRideOnItsOwnConsumer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   worker.Config
		rides int32
	}{
		{"one queue", worker.Config{Queue: "a", Concurrency: 2}, 1},
		{"two queues", worker.Config{Queues: map[string]int{"a": 1, "b": 1}, Concurrency: 2}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 0)
			spy := &rideSpy{Driver: e.d}
			ran := make(chan struct{}, 1)
			cfg := tc.cfg
			stop := runPool(t, spy, conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error {
				select {
				case ran <- struct{}{}:
				default:
				}
				return nil
			}), &cfg)
			defer stop()
			if _, err := e.client.Enqueue(context.Background(), "work", nil, &conveyor.EnqueueOptions{Queue: "a"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the job to run", 10*time.Second, ran)
			if got := spy.rides.Load(); got != tc.rides {
				t.Errorf("RideAcks called %d times, want %d", got, tc.rides)
			}
		})
	}
}
