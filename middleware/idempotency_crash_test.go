package middleware_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/middleware"
	"github.com/conveyorq/conveyor/worker"
)

// The crash-after-side-effect test: a child process runs the job through
// Idempotency, whose handler makes the side effect; the key is marked done
// as Idempotency returns; a middleware above it then blocks for ever, so
// the pool never acks, and the test SIGKILLs the child there. After the
// visibility timeout the job is delivered again to a pool in the test
// process, which must ack it without repeating the side effect.
const idemCrashPrefixEnv = "CONVEYOR_IDEM_CRASH_PREFIX"

func init() { children["idem-crash"] = idemCrashChild }

func idemCrashChild(ctx context.Context) error {
	prefix := os.Getenv(idemCrashPrefixEnv)
	rdb, err := childClient()
	if err != nil {
		return err
	}
	defer rdb.Close()
	e, err := envOn(rdb, prefix)
	if err != nil {
		return err
	}
	once, err := middleware.Idempotency(rdb, &middleware.IdempotencyConfig{Prefix: prefix})
	if err != nil {
		return err
	}
	// hang sits above Idempotency: the chain below has returned nil, the key
	// is done, and the pool would ack next. It tells the test, then waits to
	// be killed.
	hang := func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			if err := next.ProcessJob(ctx, job); err != nil {
				return err
			}
			if err := rdb.LPush(context.WithoutCancel(ctx), prefix+":hung", job.ID).Err(); err != nil {
				return err
			}
			select {} // killed here, before the ack
		})
	}
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		return rdb.Incr(ctx, prefix+":effect").Err()
	})
	p, err := worker.NewPool(e.d, h, &worker.Config{
		Queue: "q", Concurrency: 1, VisibilityTimeout: 500 * time.Millisecond,
		Middleware: []conveyor.Middleware{hang, once},
	})
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

func TestIdempotencyCrashAfterSideEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	effect := e.prefix + ":effect"
	if _, err := e.client.Enqueue(ctx, "charge", nil, &conveyor.EnqueueOptions{ID: "pay-1", Headers: idemHeader("pay-1")}); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, "idem-crash", idemCrashPrefixEnv+"="+e.prefix)
	// Block in Redis until the child says it hangs after the chain returned.
	got, err := e.rdb.BLPop(ctx, 30*time.Second, e.prefix+":hung").Result()
	if err != nil {
		t.Fatalf("child never reached the point after the side effect: %v", err)
	}
	if got[1] != "pay-1" {
		t.Fatalf("child hung on %q", got[1])
	}
	c.Kill(t)

	if v := e.rdb.Get(ctx, effect).Val(); v != "1" {
		t.Fatalf("side effect count %q after the child, want 1", v)
	}
	if v := e.rdb.Get(ctx, middleware.IdempotencyRedisKey(e.prefix, "pay-1")).Val(); v != "done" {
		t.Fatalf("key %q after the child, want done", v)
	}
	// The kill came before the ack: the job is still in flight.
	if n := e.rdb.ZCard(ctx, keys.Queue(e.prefix, "q").Part("lease")).Val(); n != 1 {
		t.Fatalf("%d jobs in flight after the kill, want 1 (killed before the ack)", n)
	}

	var (
		mu   sync.Mutex
		runs int
		seen *conveyor.Job
		done = make(chan struct{})
	)
	once, err := middleware.Idempotency(e.rdb, &middleware.IdempotencyConfig{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	observe := func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			err := next.ProcessJob(ctx, job)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && !job.Settled() && seen == nil {
				seen = job
				close(done)
			}
			return err
		})
	}
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		mu.Lock()
		runs++
		mu.Unlock()
		return errors.Join(e.rdb.Incr(ctx, effect).Err(), errors.New("the handler must not run again"))
	})
	p, err := worker.NewPool(e.d, h, &worker.Config{
		Queue: "q", VisibilityTimeout: 500 * time.Millisecond,
		Middleware: []conveyor.Middleware{observe, once},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := drivertest.Background(t, p.Run)
	waitFor(t, "the redelivered job", 30*time.Second, done)
	stop()

	mu.Lock()
	defer mu.Unlock()
	if runs != 0 {
		t.Fatalf("handler ran %d times after the crash, want 0", runs)
	}
	if v := e.rdb.Get(ctx, effect).Val(); v != "1" {
		t.Fatalf("side effect count %q, want 1", v)
	}
	if seen.ID != "pay-1" || seen.Recoveries < 1 || seen.Retries != 0 {
		t.Fatalf("redelivered job %s: Recoveries %d, Retries %d; want pay-1 after a crash recovery, no failed attempt",
			seen.ID, seen.Recoveries, seen.Retries)
	}
	if ks := leftKeys(t, e, ":idem:", ":effect"); len(ks) != 0 {
		t.Fatalf("queue keys left, so the redelivered job was not acked: %v", ks)
	}
}
