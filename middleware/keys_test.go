package middleware_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/middleware"
)

// TestKeysAreBoundedAndPrintable: the idempotency and rate-limit keys
// embed a hash of the key a job carries, never the key itself, so that
// whatever bytes an enqueuer chose (braces that would move the hash tag,
// control characters, 1 MiB) the Redis key is short, printable, one slot
// of its own, and distinct keys stay distinct.
func TestKeysAreBoundedAndPrintable(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	once, err := middleware.Idempotency(rdb, &middleware.IdempotencyConfig{Prefix: prefix, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	limit, err := middleware.RateLimit(rdb, &middleware.RateLimitConfig{
		Limit: 10, Period: time.Hour, Key: middleware.FromHeader("user"), Prefix: prefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	daily, err := middleware.RateLimit(rdb, &middleware.RateLimitConfig{
		Limit: 10, Period: time.Hour, Key: middleware.FromHeader("user"), Prefix: prefix, Name: "daily",
	})
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{"order-1", "a}b{c", "{x}", "x\x00\r\ny", strings.Repeat("k", 1<<20), "\xff\xfe", "order-1 "}
	s := &fakeSettler{}
	ran := 0
	h := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { ran++; return nil })
	for i, k := range hostile {
		headers := map[string]string{middleware.DefaultIdempotencyHeader: k, "user": k}
		for _, mw := range []conveyor.Middleware{once, limit, daily} {
			if err := mw(h).ProcessJob(ctx, newJob(s, "j", "k", headers)); err != nil {
				t.Fatalf("key %d: %v", i, err)
			}
		}
	}
	if ran != 3*len(hostile) {
		t.Fatalf("ran %d handlers, want %d: distinct keys were taken for one", ran, 3*len(hostile))
	}
	shape := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `:(idem|rl|rl:daily):\{[0-9a-f]{32}\}$`)
	got := redistest.AllKeys(t, rdb, prefix)
	for _, k := range got {
		if !shape.MatchString(k) {
			t.Errorf("key %.80q (%d bytes) is not <prefix>:<kind>:{<32 hex digits>}", k, len(k))
		}
	}
	if len(got) != 3*len(hostile) {
		t.Fatalf("%d keys, want one per job key and middleware (%d): distinct keys collided", len(got), 3*len(hostile))
	}
	slices.Sort(got)
	if i := slices.Index(got, middleware.IdempotencyRedisKey(prefix, "a}b{c")); i < 0 {
		t.Errorf("IdempotencyRedisKey(%q) is none of the keys written", "a}b{c")
	}
	if i := slices.Index(got, middleware.RateLimitRedisKey(prefix, "daily", "a}b{c")); i < 0 {
		t.Errorf("RateLimitRedisKey(daily, %q) is none of the keys written", "a}b{c")
	}
}
