package middleware_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/middleware"
	"github.com/conveyorq/conveyor/worker"
)

func idemHeader(key string) map[string]string {
	return map[string]string{middleware.DefaultIdempotencyHeader: key}
}

// TestIdempotencyGuard, without a pool, walks the key through its states:
// claimed while the handler runs; "done" with the retention TTL after a
// success, so a second job with the key is not run and left to be acked;
// released after a failure or a panic so that the retry runs; a job that
// finds the key held by another run is postponed (not run, not failed), to
// when that claim would expire if sooner than BusyDelay; a release never
// deletes another run's claim; a job without a key runs unguarded.
func TestIdempotencyGuard(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	once, err := middleware.Idempotency(rdb, &middleware.IdempotencyConfig{
		Prefix: prefix, Lease: 5 * time.Second, Retention: time.Hour, BusyDelay: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := func(k string) string { return middleware.IdempotencyRedisKey(prefix, k) }
	ran := 0
	var during string
	var duringTTL time.Duration
	ok := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		ran++
		k := key(job.Headers[middleware.DefaultIdempotencyHeader])
		during, duringTTL = rdb.Get(ctx, k).Val(), rdb.PTTL(ctx, k).Val()
		return nil
	})
	s := &fakeSettler{}

	// Success: claimed during the run, done after it.
	if err := once(ok).ProcessJob(ctx, newJob(s, "1", "pay", idemHeader("order-1"))); err != nil {
		t.Fatal(err)
	}
	if ran != 1 || !strings.HasPrefix(during, "running:") || duringTTL <= 0 || duringTTL > 5*time.Second {
		t.Fatalf("during the run: ran %d, key %q TTL %v; want a running claim with the lease", ran, during, duringTTL)
	}
	if v, ttl := rdb.Get(ctx, key("order-1")).Val(), rdb.PTTL(ctx, key("order-1")).Val(); v != "done" || ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("after success: key %q TTL %v, want done with the 1h retention", v, ttl)
	}

	// Duplicate: not run, nil, left for the pool to ack.
	dup := newJob(s, "2", "pay", idemHeader("order-1"))
	if err := once(ok).ProcessJob(ctx, dup); err != nil || ran != 1 || dup.Settled() {
		t.Fatalf("duplicate: err %v, ran %d, settled %v; want nil, 1, false", err, ran, dup.Settled())
	}

	// Failure: released, and the retry runs.
	fail := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { ran++; return errBoom })
	if err := once(fail).ProcessJob(ctx, newJob(s, "3", "pay", idemHeader("order-2"))); err != errBoom {
		t.Fatalf("failure: err %v, want errBoom", err)
	}
	if n := rdb.Exists(ctx, key("order-2")).Val(); n != 0 {
		t.Fatal("a failed run left its claim")
	}
	if err := once(ok).ProcessJob(ctx, newJob(s, "3", "pay", idemHeader("order-2"))); err != nil || ran != 3 {
		t.Fatalf("retry after a failure: err %v, ran %d; want it run", err, ran)
	}

	// Panic: released, the panic goes on up.
	func() {
		defer func() {
			if r := recover(); r != "kaput" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		_ = once(conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { panic("kaput") })).
			ProcessJob(ctx, newJob(s, "4", "pay", idemHeader("order-3")))
	}()
	if n := rdb.Exists(ctx, key("order-3")).Val(); n != 0 {
		t.Fatal("a panicking run left its claim")
	}

	// Busy: another run holds the key; postponed by BusyDelay.
	rdb.Set(ctx, key("order-4"), "running:other", 10*time.Second)
	busy := newJob(s, "5", "pay", idemHeader("order-4"))
	before := time.Now()
	if err := once(ok).ProcessJob(ctx, busy); err != nil || ran != 3 || !busy.Settled() || len(s.postpones) != 1 {
		t.Fatalf("busy: err %v, ran %d, settled %v, postponed %d; want nil, not run, postponed", err, ran, busy.Settled(), len(s.postpones))
	}
	if at := s.postpones[0]; at.Before(before.Add(300*time.Millisecond)) || at.After(time.Now().Add(300*time.Millisecond)) {
		t.Fatalf("busy job postponed to %v, want now+300ms", at)
	}
	// A claim that runs out sooner than BusyDelay: postponed to its end.
	rdb.Set(ctx, key("order-5"), "running:other", 100*time.Millisecond)
	before = time.Now()
	if err := once(ok).ProcessJob(ctx, newJob(s, "6", "pay", idemHeader("order-5"))); err != nil || len(s.postpones) != 2 {
		t.Fatalf("short claim: err %v, postponed %d", err, len(s.postpones))
	}
	if at := s.postpones[1]; at.After(time.Now().Add(100 * time.Millisecond)) {
		t.Fatalf("postponed to %v, after the other claim's end (now+100ms, from %v)", at, before)
	}
	if len(s.retries) != 0 || len(s.discards) != 0 {
		t.Fatalf("a guard retried or discarded: %v %v", s.retries, s.discards)
	}

	// A failed run whose claim was taken over does not delete the new owner's.
	takeover := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		rdb.Set(ctx, key("order-6"), "running:other", time.Minute)
		return errBoom
	})
	if err := once(takeover).ProcessJob(ctx, newJob(s, "7", "pay", idemHeader("order-6"))); err != errBoom {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, key("order-6")).Val(); v != "running:other" {
		t.Fatalf("release deleted another run's claim: key is %q", v)
	}

	// No key: runs, writes nothing.
	if err := once(ok).ProcessJob(ctx, newJob(s, "8", "pay", nil)); err != nil || ran != 4 {
		t.Fatalf("no key: err %v, ran %d", err, ran)
	}
	if n := rdb.Exists(ctx, middleware.IdempotencyRedisKey(prefix, "")).Val(); n != 0 {
		t.Fatal("a job without a key wrote a key")
	}
}

// TestIdempotencyKeyFunc: a Key func wins over the header.
func TestIdempotencyKeyFunc(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	once, err := middleware.Idempotency(rdb, &middleware.IdempotencyConfig{
		Prefix: prefix,
		Key:    func(job *conveyor.Job) string { return job.Kind + ":" + string(job.Payload) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := once(conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { ran++; return nil }))
	for i, kind := range []string{"a", "a", "b"} {
		if err := h.ProcessJob(ctx, newJob(&fakeSettler{}, string(rune('0'+i)), kind, idemHeader("ignored"))); err != nil {
			t.Fatal(err)
		}
	}
	if ran != 2 {
		t.Fatalf("ran %d times, want 2 (kinds a and b; the header ignored)", ran)
	}
	if v := rdb.Get(ctx, middleware.IdempotencyRedisKey(prefix, "b:payload")).Val(); v != "done" {
		t.Fatalf("key from the func is %q, want done", v)
	}
}

// TestIdempotencyLeaseRenewed: a handler that runs for several leases keeps
// its claim (renewed every Lease/3), so a copy of its job arriving late is
// postponed instead of run.
func TestIdempotencyLeaseRenewed(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	// Renewed every 100 ms: a 60 ms lease (renewed every 20 ms) ran out
	// under a full make test on 2 cores (the copy ran).
	const lease = 300 * time.Millisecond
	once, err := middleware.Idempotency(rdb, &middleware.IdempotencyConfig{Prefix: prefix, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeSettler{}
	ran := 0
	var copyErr error
	var copyJob *conveyor.Job
	var h conveyor.Handler
	h = once(conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		ran++
		if job.ID == "copy" {
			return nil
		}
		// The handler's work outlasts five leases (the elapsed time is
		// what is tested here, not a synchronisation).
		<-time.After(5 * lease)
		copyJob = newJob(s, "copy", "k", idemHeader("long"))
		copyErr = h.ProcessJob(ctx, copyJob)
		return nil
	}))
	if err := h.ProcessJob(ctx, newJob(s, "long", "k", idemHeader("long"))); err != nil {
		t.Fatal(err)
	}
	if copyErr != nil || ran != 1 || !copyJob.Settled() || len(s.postpones) != 1 {
		t.Fatalf("copy during a long run: err %v, ran %d, postponed %d; want it postponed, not run", copyErr, ran, len(s.postpones))
	}
	if v := rdb.Get(ctx, middleware.IdempotencyRedisKey(prefix, "long")).Val(); v != "done" {
		t.Fatalf("key %q after the long run, want done", v)
	}
}

// TestIdempotencyOnceUnderConcurrency: 100 jobs with one idempotency key,
// enqueued from 10 goroutines, through a pool of 20: the side effect (an
// INCR) happens once, every job is settled without a failed attempt
// (copies that found the key held were postponed, later ones found it done
// and were acked), and the queue ends empty.
func TestIdempotencyOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	effect := e.prefix + ":effect"
	once, err := middleware.Idempotency(e.rdb, &middleware.IdempotencyConfig{Prefix: e.prefix, BusyDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := e.client.Enqueue(ctx, "charge", nil, &conveyor.EnqueueOptions{Headers: idemHeader("order-42")}); err != nil {
					t.Errorf("goroutine %d: enqueue: %v", g, err)
				}
			}
		}()
	}
	wg.Wait()

	var (
		mu        sync.Mutex
		acked     = map[string]bool{}
		postponed int
		runs      int
		busySeen  = make(chan struct{})
		allDone   = make(chan struct{})
	)
	observe := func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			err := next.ProcessJob(ctx, job)
			mu.Lock()
			defer mu.Unlock()
			if job.Retries != 0 {
				t.Errorf("job %s has Retries %d: a guarded copy must not count failures", job.ID, job.Retries)
			}
			switch {
			case err != nil:
				t.Errorf("job %s: %v", job.ID, err)
			case job.Settled(): // postponed by the guard
				postponed++
				if postponed == 1 {
					close(busySeen)
				}
			default: // the pool acks it
				acked[job.ID] = true
				if len(acked) == n {
					close(allDone)
				}
			}
			return err
		})
	}
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		mu.Lock()
		runs++
		mu.Unlock()
		if err := e.rdb.Incr(ctx, effect).Err(); err != nil {
			return err
		}
		// Hold the key until a concurrent copy has found it held.
		select {
		case <-busySeen:
		case <-time.After(10 * time.Second):
			t.Error("no concurrent copy was postponed while the key was held")
		}
		return nil
	})
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: "q", Concurrency: 20, Middleware: []conveyor.Middleware{observe, once}})
	if err != nil {
		t.Fatal(err)
	}
	stop := drivertest.Background(t, p.Run)
	waitFor(t, "all 100 jobs acked", 60*time.Second, allDone)
	stop()

	mu.Lock()
	defer mu.Unlock()
	if got := e.rdb.Get(ctx, effect).Val(); got != "1" || runs != 1 {
		t.Fatalf("side effect ran %s times (handler %d), want once", got, runs)
	}
	t.Logf("%d jobs: 1 run, %d postponements while the key was held", n, postponed)
	if ks := leftKeys(t, e, ":idem:", ":effect"); len(ks) != 0 {
		t.Fatalf("queue keys left, so some job was not acked: %v", ks)
	}
	if v := e.rdb.Get(ctx, middleware.IdempotencyRedisKey(e.prefix, "order-42")).Val(); v != "done" {
		t.Fatalf("key is %q, want done", v)
	}
}

func TestIdempotencyConfig(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, cfg := range []*middleware.IdempotencyConfig{
		{Lease: time.Millisecond}, {Retention: time.Microsecond}, {BusyDelay: -1}, {Prefix: "a b"},
	} {
		if _, err := middleware.Idempotency(rdb, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if _, err := middleware.Idempotency(nil, nil); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := middleware.Idempotency(rdb, nil); err != nil {
		t.Errorf("nil config: %v", err)
	}
}
