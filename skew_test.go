package conveyor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

var skews = []time.Duration{5 * time.Second, -5 * time.Second, time.Minute, -time.Minute}

// TestLeaseDeadlineUnderSkew: a delivery's LeaseDeadline is by this
// process's clock whatever the skew of Redis's: within the visibility
// timeout of the moments before and after the fetch (and the extend).
func TestLeaseDeadlineUnderSkew(t *testing.T) {
	t.Parallel()
	eachSkew(t, func(t *testing.T, d broker.Driver, c *conveyor.Client) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.Enqueue(ctx, "k", nil, nil); err != nil {
			t.Fatal(err)
		}
		const vt = 3 * time.Second
		cons, err := d.Open(ctx, "default", &broker.ConsumerOptions{VisibilityTimeout: vt})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close(ctx)
		within := func(what string, got, before, after time.Time, ttl time.Duration) {
			t.Helper()
			if got.Before(before.Add(ttl-time.Millisecond)) || got.After(after.Add(ttl)) {
				t.Fatalf("%s: LeaseDeadline %v from now, want between %v and %v from now",
					what, time.Until(got), time.Until(before.Add(ttl)), time.Until(after.Add(ttl)))
			}
		}
		before := time.Now()
		ds, err := cons.Fetch(ctx, 1)
		after := time.Now()
		if err != nil || len(ds) != 1 {
			t.Fatalf("fetch: %d, %v", len(ds), err)
		}
		within("fetch", ds[0].LeaseDeadline, before, after, vt)
		before = time.Now()
		if err := cons.Extend(ctx, vt, ds[0]); err != nil { // the stream driver caps a lease at vt
			t.Fatal(err)
		}
		after = time.Now()
		within("extend", ds[0].LeaseDeadline, before, after, vt)
	})
}

// eachSkew runs f in parallel for every skew and durable driver, with a
// driver and a client on a redis-server of its own whose clock is off by
// the skew.
func eachSkew(t *testing.T, f func(t *testing.T, d broker.Driver, c *conveyor.Client)) {
	for _, skew := range skews {
		for _, drv := range drivertest.Durable {
			t.Run(drv.Name+"/"+skew.String(), func(t *testing.T) {
				t.Parallel()
				rdb := redistest.StartSkewedServer(t, skew).Client(t)
				d := drv.Must(t, rdb, "skew")
				c, err := conveyor.NewClient(d, nil)
				if err != nil {
					t.Fatal(err)
				}
				f(t, d, c)
			})
		}
	}
}

// TestHeartbeatUnderSkew: with Redis's clock off the worker's by each
// skew and a visibility timeout of a second, a job that runs for three is
// kept leased by the heartbeat and runs once.
func TestHeartbeatUnderSkew(t *testing.T) {
	t.Parallel()
	eachSkew(t, func(t *testing.T, d broker.Driver, c *conveyor.Client) {
		runs := make(chan string, 10)
		done := make(chan struct{})
		h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			runs <- job.ID
			select { // the work of a long job: three visibility timeouts
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
			if job.ID == "long" {
				close(done)
			}
			return nil
		})
		p, err := worker.NewPool(d, h, &worker.Config{Concurrency: 2, VisibilityTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(context.Background(), "k", nil, &conveyor.EnqueueOptions{ID: "long"}); err != nil {
			t.Fatal(err)
		}
		stop := drivertest.Background(t, p.Run)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the long job did not finish")
		}
		stop()
		close(runs)
		n := 0
		for range runs {
			n++
		}
		if n != 1 {
			t.Fatalf("the long job ran %d times, want once (its lease lapsed under the skew)", n)
		}
	})
}

// TestDelayUnderSkew: a delay lasts as long as asked by this process's
// clock whatever the skew of Redis's, for a job enqueued with Delay and for
// a retry's backoff: each waits what it asked, within the promoter's
// lateness.
func TestDelayUnderSkew(t *testing.T) {
	t.Parallel()
	const wait = 2 * time.Second
	eachSkew(t, func(t *testing.T, d broker.Driver, c *conveyor.Client) {
		type run struct {
			attempt int
			at      time.Time
		}
		runs := make(chan run, 10)
		h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			runs <- run{job.Retries, time.Now()}
			if job.Retries == 0 {
				return errors.New("fails once, retried after the backoff")
			}
			return nil
		})
		p, err := worker.NewPool(d, h, &worker.Config{
			Concurrency: 1, MaxAttempts: 2,
			Backoff: func(int) time.Duration { return wait },
		})
		if err != nil {
			t.Fatal(err)
		}
		stop := drivertest.Background(t, p.Run)
		defer stop()
		enqueued := time.Now()
		if _, err := c.Enqueue(context.Background(), "k", nil, &conveyor.EnqueueOptions{Delay: wait}); err != nil {
			t.Fatal(err)
		}
		next := func() run {
			t.Helper()
			select {
			case r := <-runs:
				return r
			case <-time.After(4 * wait):
				t.Fatalf("no run within %v", 4*wait)
				return run{}
			}
		}
		check := func(what string, from, to time.Time) {
			t.Helper()
			// The lower bound is exact (a timer never fires early);
			// the upper one leaves a second for the promoter.
			if got := to.Sub(from); got < wait-time.Millisecond || got > wait+time.Second {
				t.Errorf("%s waited %v, want %v", what, got, wait)
			}
		}
		first := next()
		check("Delay", enqueued, first.at)
		second := next()
		if second.attempt != 1 {
			t.Fatalf("second run is attempt %d, want 1", second.attempt)
		}
		check("the retry", first.at, second.at)
	})
}
