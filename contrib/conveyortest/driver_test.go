package conveyortest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
)

// A promoter sleeping until the next timer wakes when the clock moves.
func TestWatchTimersWakesOnAdvance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := e.d.WatchTimers(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("WatchTimers did not wake when the clock moved")
	}
}

func TestLeaseExpiresByClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	idle := make(chan struct{}, 10)
	// The default lease: 30s. Idle tells the test a Fetch is about to wait.
	c, err := e.d.Open(ctx, "default", &broker.ConsumerOptions{Idle: func() { idle <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	e.enqueue(t, "k", nil, nil)
	first, err := c.Fetch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := conveyortest.DefaultStart.Add(broker.DefaultVisibilityTimeout); !first[0].LeaseDeadline.Equal(want) {
		t.Fatalf("lease deadline %v, want %v by the fake clock", first[0].LeaseDeadline, want)
	}
	got := make(chan error, 1)
	var again []*conveyor.Job
	go func() {
		ds, err := c.Fetch(ctx, 1)
		for _, d := range ds {
			again = append(again, conveyor.NewJob(d, nil))
		}
		got <- err
	}()
	expect(t, idle, struct{}{}) // blocked in Fetch: only the clock's move can wake it
	e.clock.Advance(29 * time.Second)
	expect(t, idle, struct{}{}) // woken, and waiting again: the lease has a second left
	e.clock.Advance(time.Second)
	select {
	case err = <-got:
	case <-ctx.Done():
		t.Fatal("Fetch did not return when the clock passed the lease deadline")
	}
	if err != nil || len(again) != 1 || again[0].Recoveries != 1 {
		t.Fatalf("Fetch after the lease ran out: %d jobs, %v; want the job again with 1 recovery", len(again), err)
	}
	if err := c.Ack(ctx, first[0]); !errors.Is(err, conveyor.ErrLeaseLost) {
		t.Fatalf("stale Ack: %v, want ErrLeaseLost", err)
	}
}
