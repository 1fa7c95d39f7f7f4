package middleware_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/middleware"
)

// TestScriptsRunOnMiniredis runs every script of the package on miniredis
// (gopher-lua), whose clock the test sets: the rate limiter's window edges
// are checked to the millisecond by the server's TIME, and the idempotency
// scripts go through run, done, busy and release.
func TestScriptsRunOnMiniredis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)

	limit, err := middleware.RateLimit(rdb, &middleware.RateLimitConfig{Limit: 2, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { ran++; return nil })
	s := &fakeSettler{}
	step := func(at time.Duration, wantRun bool, wantFree time.Duration) {
		t.Helper()
		mr.SetTime(t0.Add(at))
		before, postponed := ran, len(s.postpones)
		if err := limit(h).ProcessJob(ctx, newJob(s, "j", "k", nil)); err != nil {
			t.Fatalf("at +%v: %v", at, err)
		}
		switch {
		case wantRun && ran != before+1:
			t.Fatalf("at +%v: refused, want admitted", at)
		case !wantRun && (ran != before || len(s.postpones) != postponed+1):
			t.Fatalf("at +%v: admitted, want postponed", at)
		case !wantRun:
			// Postponed to when a slot frees, plus at most Period/Limit of jitter.
			free := t0.Add(wantFree)
			if got := s.postpones[postponed]; got.Before(free) || got.After(free.Add(500*time.Millisecond)) {
				t.Fatalf("at +%v: postponed to +%v, want +%v (+ jitter)", at, got.Sub(t0), wantFree)
			}
		}
	}
	step(0, true, 0)
	step(500*time.Millisecond, true, 0)
	step(999*time.Millisecond, false, time.Second) // the first admission is still inside
	step(1000*time.Millisecond, true, 0)           // it has just left
	step(1000*time.Millisecond, false, 1500*time.Millisecond)
	step(1500*time.Millisecond, true, 0)
	if ttl := rdb.PTTL(ctx, middleware.RateLimitRedisKey("", "", "k")).Val(); ttl != time.Second {
		t.Fatalf("limiter key TTL %v, want 1s after the last admission", ttl)
	}

	once, err := middleware.Idempotency(rdb, &middleware.IdempotencyConfig{Lease: 90 * time.Millisecond, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ran = 0
	key := middleware.IdempotencyRedisKey("", "x")
	slow := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		ran++
		if v, _ := mr.Get(key); !strings.HasPrefix(v, "running:") {
			t.Errorf("claim during the run is %q", v)
		}
		// miniredis's clock stands still, so shorten the claim by hand and
		// wait for the lease keeper (extend.lua) to renew it.
		mr.SetTTL(key, time.Millisecond)
		deadline := time.Now().Add(5 * time.Second)
		for mr.TTL(key) != 90*time.Millisecond {
			if time.Now().After(deadline) {
				t.Errorf("claim not renewed: TTL %v", mr.TTL(key))
				break
			}
			<-time.After(5 * time.Millisecond)
		}
		if job.ID == "fail" {
			return errBoom
		}
		return nil
	})
	if err := once(slow).ProcessJob(ctx, newJob(s, "fail", "k", idemHeader("x"))); err != errBoom || mr.Exists(key) {
		t.Fatalf("failed run: err %v, key left %v", err, mr.Exists(key))
	}
	if err := once(slow).ProcessJob(ctx, newJob(s, "ok", "k", idemHeader("x"))); err != nil {
		t.Fatal(err)
	}
	if v, _ := mr.Get(key); v != "done" || mr.TTL(key) != time.Minute {
		t.Fatalf("after success: %q TTL %v", v, mr.TTL(key))
	}
	if err := once(slow).ProcessJob(ctx, newJob(s, "dup", "k", idemHeader("x"))); err != nil || ran != 2 {
		t.Fatalf("duplicate: err %v, ran %d", err, ran)
	}
	mr.Set(middleware.IdempotencyRedisKey("", "y"), "running:other")
	mr.SetTTL(middleware.IdempotencyRedisKey("", "y"), time.Minute)
	postponed := len(s.postpones)
	if err := once(slow).ProcessJob(ctx, newJob(s, "busy", "k", idemHeader("y"))); err != nil || ran != 2 || len(s.postpones) != postponed+1 {
		t.Fatalf("busy: err %v, ran %d, postponed %d", err, ran, len(s.postpones)-postponed)
	}
}
