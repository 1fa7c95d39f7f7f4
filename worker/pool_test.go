package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// durable lists the at-least-once drivers every pool test runs on.
var durable = drivertest.Durable

type env struct {
	rdb    redis.UniversalClient
	prefix string
	d      broker.Driver
	client *conveyor.Client
}

func newEnv(t *testing.T, i int) env { return newEnvB(t, i) }

func newEnvB(t testing.TB, i int) env {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d := durable[i].Must(t, rdb, prefix)
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	return env{rdb: rdb, prefix: prefix, d: d, client: c}
}

func waitFor(t *testing.T, what string, d time.Duration, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

func assertNoKeys(t testing.TB, e env) {
	t.Helper()
	if ks := redistest.Keys(t, e.rdb, e.prefix); len(ks) != 0 {
		t.Fatalf("keys left in Redis: %v", ks)
	}
}

func TestPoolMovesManyJobs(t *testing.T) {
	t.Parallel()
	const n = 100_000
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			for b := 0; b < n; b += 1000 {
				reqs := make([]conveyor.Request, 1000)
				for j := range reqs {
					reqs[j] = conveyor.Request{Kind: "count", Args: []byte(fmt.Sprint(b + j))}
				}
				if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
					t.Fatal(err)
				}
			}
			var (
				seen    = make([]atomic.Int32, n)
				handled atomic.Int64
				done    = make(chan struct{})
			)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				var k int
				if _, err := fmt.Sscan(string(job.Payload), &k); err != nil {
					return err
				}
				seen[k].Add(1)
				if handled.Add(1) == n {
					close(done)
				}
				return nil
			})
			p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 50})
			if err != nil {
				t.Fatal(err)
			}
			stop := drivertest.Background(t, p.Run)
			waitFor(t, "all jobs handled", 5*time.Minute, done)
			stop()
			for k := range seen {
				if c := seen[k].Load(); c != 1 {
					t.Fatalf("job %d handled %d times", k, c)
				}
			}
			assertNoKeys(t, e)
		})
	}
}

// TestShutdown: jobs that finish within the grace are acked; jobs still
// running when it ends are handed back at once (not after their lease) and
// none is lost.
func TestShutdown(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			const quick, stuck = 5, 3
			var reqs []conveyor.Request
			for j := range quick {
				reqs = append(reqs, conveyor.Request{Kind: "quick", Args: []byte(fmt.Sprint(j))})
			}
			for j := range stuck {
				reqs = append(reqs, conveyor.Request{Kind: "stuck", Args: []byte(fmt.Sprint(j))})
			}
			if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
				t.Fatal(err)
			}
			var (
				startedN    atomic.Int32
				allStarted  = make(chan struct{})
				proceed     = make(chan struct{})
				quickDone   atomic.Int32
				stuckCancel atomic.Int32
			)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				if startedN.Add(1) == quick+stuck {
					close(allStarted)
				}
				if job.Kind == "quick" {
					<-proceed // running when shutdown starts, finishes within the grace
					quickDone.Add(1)
					return nil
				}
				<-ctx.Done() // ignores the grace: must be cancelled and handed back
				if errors.Is(context.Cause(ctx), worker.ErrShutdown) {
					stuckCancel.Add(1)
				}
				return ctx.Err()
			})
			p, err := worker.NewPool(e.d, h, &worker.Config{
				Queue: "q", Concurrency: quick + stuck,
				VisibilityTimeout: time.Hour, // a hand-back must not wait for the lease
				ShutdownGrace:     300 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			stop := drivertest.Background(t, p.Run)
			waitFor(t, "all jobs started", 10*time.Second, allStarted)
			shutdownDone := make(chan struct{})
			go func() {
				defer close(shutdownDone)
				if err := p.Shutdown(context.Background()); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
			// The quick jobs finish only once shutdown has begun: within the grace.
			waitFor(t, "shutdown to begin", 10*time.Second, p.Stopping())
			close(proceed)
			waitFor(t, "shutdown", 10*time.Second, shutdownDone)
			stop()
			if quickDone.Load() != quick {
				t.Fatalf("%d quick jobs finished, want %d", quickDone.Load(), quick)
			}
			if stuckCancel.Load() != stuck {
				t.Fatalf("%d stuck jobs saw ErrShutdown, want %d", stuckCancel.Load(), stuck)
			}
			// The stuck jobs are ready again right away, with no attempt counted.
			c, err := e.d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			var back []*broker.Delivery
			for len(back) < stuck {
				fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				ds, err := c.Fetch(fctx, 10)
				cancel()
				if err != nil {
					t.Fatalf("fetch handed-back jobs: got %d of %d: %v", len(back), stuck, err)
				}
				back = append(back, ds...)
			}
			for _, d := range back {
				if d.Kind != "stuck" || d.Retries != 0 {
					t.Fatalf("handed back %s attempt %d, want stuck attempt 0", d.Kind, d.Retries)
				}
			}
			if err := c.Ack(ctx, back...); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			assertNoKeys(t, e)
		})
	}
}

// deadRecords reads a queue's discard queue.
func deadRecords(t *testing.T, e env, queue string) []codec.Discarded {
	t.Helper()
	raw, err := e.rdb.LRange(context.Background(), keys.Queue(e.prefix, queue).Part("dead"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []codec.Discarded
	for _, r := range raw {
		d, err := codec.DecodeDiscarded([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// runUntilDiscarded runs a pool with h until the queue's discard queue holds
// want entries, then returns them.
// runUntilDiscarded runs a pool for h until the discard queue holds want
// records and every channel of also is closed (other jobs done), then stops
// it and returns the records.
func runUntilDiscarded(t *testing.T, e env, h conveyor.Handler, cfg *worker.Config, want int, also ...<-chan struct{}) []codec.Discarded {
	t.Helper()
	p, err := worker.NewPool(e.d, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := drivertest.Background(t, p.Run)
	defer stop()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Block on the discard list instead of polling it.
		key := keys.Queue(e.prefix, cfg.Queue).Part("dead")
		n, err := e.rdb.LLen(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int(n) >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("discard queue has %d entries, want %d", n, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		// BLMOVE onto itself wakes as soon as the list is non-empty.
		_ = e.rdb.Do(ctx, "BLMOVE", key, key, "RIGHT", "RIGHT", "0.2").Err()
		cancel()
	}
	for _, ch := range also {
		waitFor(t, "the other jobs", time.Until(deadline), ch)
	}
	stop()
	return deadRecords(t, e, cfg.Queue)
}

func TestBadJobsDoNotStopThePool(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			type order struct{ ID int }
			var good atomic.Int32
			goodDone := make(chan struct{})
			mux := worker.NewMux()
			worker.HandleJSON(mux, "order", func(ctx context.Context, job *conveyor.Job, o order) error {
				if good.Add(1) == 2 {
					close(goodDone)
				}
				return nil
			})
			mux.HandleFunc("panics", func(ctx context.Context, job *conveyor.Job) error { panic("boom") })
			for _, r := range []conveyor.Request{
				{Kind: "no-such-kind", Args: []byte("{}")},
				{Kind: "order", Args: []byte("not json")},
				{Kind: "panics"},
				{Kind: "order", Args: order{ID: 1}},
				{Kind: "order"}, // no payload: the zero order, not a decode error
			} {
				if _, err := e.client.Enqueue(ctx, r.Kind, r.Args, nil); err != nil {
					t.Fatal(err)
				}
			}
			// Stop once the bad jobs are discarded and the good ones ran:
			// the discards may all land before a good job starts.
			dead := runUntilDiscarded(t, e, mux, &worker.Config{Queue: "q", MaxAttempts: 1}, 3, goodDone)
			reasons := map[string]string{}
			for _, d := range dead {
				var m broker.Message
				if _, err := codec.Decode(d.Message, &m); err != nil {
					t.Fatal(err)
				}
				reasons[m.Kind] += d.Reason
			}
			for kind, want := range map[string]string{"no-such-kind": "no handler", "order": "cannot decode", "panics": "panicked: boom"} {
				if !strings.Contains(reasons[kind], want) {
					t.Errorf("discard reason for %s = %q, want it to contain %q", kind, reasons[kind], want)
				}
			}
			if good.Load() != 2 {
				t.Fatalf("good jobs ran %d times, want 2", good.Load())
			}
		})
	}
}

func TestRetryThenSucceed(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			var attempts []int
			var mu sync.Mutex
			done := make(chan struct{})
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				mu.Lock()
				defer mu.Unlock()
				attempts = append(attempts, job.Retries)
				if job.Retries < 2 {
					return conveyor.RetryAfter(20*time.Millisecond, errors.New("not yet"))
				}
				close(done)
				return nil
			})
			if _, err := e.client.Enqueue(context.Background(), "flaky", nil, nil); err != nil {
				t.Fatal(err)
			}
			p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q"})
			if err != nil {
				t.Fatal(err)
			}
			stop := drivertest.Background(t, p.Run)
			waitFor(t, "third attempt", 10*time.Second, done)
			stop()
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(attempts) != "[0 1 2]" {
				t.Fatalf("attempts = %v, want [0 1 2]", attempts)
			}
			assertNoKeys(t, e)
		})
	}
}

// TestHeartbeatKeepsLongJob: a job running for several visibility timeouts
// keeps its lease, so no other consumer gets it meanwhile.
func TestHeartbeatKeepsLongJob(t *testing.T) {
	t.Parallel()
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			const vt = 300 * time.Millisecond
			running := make(chan struct{})
			finish := make(chan struct{})
			var runs atomic.Int32
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				if runs.Add(1) == 1 {
					close(running)
				}
				<-finish
				return ctx.Err()
			})
			if _, err := e.client.Enqueue(ctx, "long", nil, nil); err != nil {
				t.Fatal(err)
			}
			p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", VisibilityTimeout: vt})
			if err != nil {
				t.Fatal(err)
			}
			stop := drivertest.Background(t, p.Run)
			waitFor(t, "job running", 10*time.Second, running)
			// Another consumer, fetching for 5 visibility timeouts, must get nothing.
			c, err := e.d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: vt})
			if err != nil {
				t.Fatal(err)
			}
			fctx, cancel := context.WithTimeout(ctx, 5*vt)
			ds, err := c.Fetch(fctx, 1)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("second consumer got %d jobs (err %v) while the first kept its lease", len(ds), err)
			}
			_ = c.Close(ctx)
			close(finish)
			stop()
			if runs.Load() != 1 {
				t.Fatalf("job ran %d times, want 1", runs.Load())
			}
			assertNoKeys(t, e)
		})
	}
}

// TestLeaseLostCancelsHandler: when the job's lease is taken away, the
// heartbeat finds out, the handler's context ends with ErrLeaseLost and its
// settle calls fail.
func TestLeaseLostCancelsHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0) // list: the lease ZSET can be expired by hand
	ctx := context.Background()
	m, err := e.client.Enqueue(ctx, "victim", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	result := make(chan error, 1)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		close(running)
		<-ctx.Done()
		cause := context.Cause(ctx)
		ackErr := job.Ack(context.Background())
		if !errors.Is(ackErr, conveyor.ErrLeaseLost) {
			result <- fmt.Errorf("ack after lease loss: %v, want ErrLeaseLost", ackErr)
		} else {
			result <- cause
		}
		return nil
	})
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", VisibilityTimeout: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Background(t, p.Run)
	waitFor(t, "job running", 10*time.Second, running)
	// Expire the lease and reap it, as another process's reaper would. The
	// lease member is the stored message, so take it from the ZSET. The
	// pool's heartbeat may extend the lease between the two calls: then
	// Reap finds nothing due, and the lease is expired again. The pool is
	// the queue's keeper and may reap it first.
	lease := keys.Queue(e.prefix, "q").Part("lease")
	giveUp := time.Now().Add(10 * time.Second)
	for {
		members, err := e.rdb.ZRange(ctx, lease, 0, -1).Result()
		if err == nil && len(members) == 0 {
			break // the pool, its queue's keeper, reaped the expired lease first
		}
		if err != nil || len(members) != 1 || !strings.Contains(members[0], m.ID) {
			t.Fatalf("lease members %q (%v), want the one of job %s", members, err, m.ID)
		}
		if err := e.rdb.ZAddXX(ctx, lease, redis.Z{Score: 1, Member: members[0]}).Err(); err != nil {
			t.Fatal(err)
		}
		n, err := e.d.(*list.Driver).Reap(ctx, "q")
		if err != nil || n > 1 {
			t.Fatalf("Reap = %d, %v; want 1 job requeued", n, err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatal("Reap requeued nothing for 10s after the lease was expired")
		}
	}
	select {
	case cause := <-result:
		if !errors.Is(cause, conveyor.ErrLeaseLost) {
			t.Fatalf("handler context cause = %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled after its lease was lost")
	}
}

func TestRedisUnreachableAtStart(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	for _, drv := range durable {
		d := drv.Must(t, rdb, "cvt-unreachable")
		p, err := worker.NewPool(d, conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil }), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = p.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("%s: Run = %v, want an error saying Redis is unreachable", drv.Name, err)
		}
	}
}

// A pool stopped before it started returns nil at once, touching nothing.
func TestRunStoppedBeforeStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil })
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run with a cancelled context = %v, want nil", err)
	}
	p2, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p2.Run(context.Background()); err != nil {
		t.Fatalf("Run after Shutdown = %v, want nil", err)
	}
	assertNoKeys(t, e)
}

// slowCheck is a driver whose Check waits for its context to end, telling
// entered when it starts: a start-up check against a Redis that does not
// answer.
type slowCheck struct {
	broker.Driver
	entered chan struct{}
}

func (s slowCheck) Check(ctx context.Context) error {
	s.entered <- struct{}{}
	<-ctx.Done()
	return fmt.Errorf("check: INFO server: %w", ctx.Err())
}

// A pool stopped while its start-up check waits returns nil, whether its
// context ends or Shutdown is called: it was stopped, it did not fail.
func TestRunStoppedDuringStartupCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil })
	for _, how := range []string{"context", "Shutdown"} {
		d := slowCheck{e.d, make(chan struct{}, 1)}
		p, err := worker.NewPool(d, h, &worker.Config{Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- p.Run(ctx) }()
		<-d.entered
		if how == "context" {
			cancel()
		} else {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := p.Shutdown(sctx)
			scancel()
			if err != nil {
				t.Fatalf("Shutdown during the check: %v (Run did not stop)", err)
			}
		}
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("stopped by %s during the check: Run = %v, want nil", how, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stopped by %s during the check: Run did not return", how)
		}
		cancel()
	}
}
