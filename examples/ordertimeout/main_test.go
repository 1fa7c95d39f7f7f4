package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// The demo end to end: payment wins order 1001's race, the timer wins
// order 1002's, and the stock count shows exactly one order returned it.
func checkDemo(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, rdb, slog.New(slog.DiscardHandler), &out, 300*time.Millisecond); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	for _, want := range []string{
		"order 1001: payment arrived; payment won the race: true",
		"order 1002: timeout won, order cancelled and stock returned",
		"order 1001: payment timer cancelled before it fired: true",
		"final: order 1001 is paid",
		"final: order 1002 is cancelled",
		"final: tea in stock: 9",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDemoOnRealRedis(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	checkDemo(t, rdb)
}

// On the embedded Redis the test can also see that the demo leaves no keys.
func TestDemoOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	checkDemo(t, rdb)
	if keys := mr.Keys(); len(keys) != 0 {
		t.Fatalf("demo left keys behind: %v", keys)
	}
}
