package stream_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker/stream"
)

// TestStaleConsumersRemoved: consumers left in the group by crashed
// processes (they hold nothing and have been idle past the threshold) are
// removed by a live consumer's fetch; one holding entries stays (its
// entries are taken over first), and so do live consumers. Sweeps are gated
// per queue across the fleet by the prune key.
func TestStaleConsumersRemoved(t *testing.T) {
	t.Parallel()
	const idle = 50 * time.Millisecond
	e := newEnv(t, stream.WithPrune(&stream.Config{}, idle, time.Nanosecond))
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"), msg("q", "c"))
	live := e.open("q", time.Minute)
	ds := e.fetch(live, 1)
	s := e.key("q", "stream")
	for _, name := range []string{"crashed-1", "crashed-2", "crashed-holding"} {
		if err := e.rdb.XGroupCreateConsumer(ctx, s, "conveyor", name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: s, Group: "conveyor", Consumer: "crashed-holding",
		MinIdle: 0, Messages: []string{ds[0].Receipt}}).Err(); err != nil {
		t.Fatal(err)
	}
	// Wait (on Redis's own measure) until the crashed consumers are idle
	// past the threshold.
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs := consumers(t, e)
		if cs["crashed-1"] > idle && cs["crashed-2"] > idle && cs["crashed-holding"] > idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers not idle in time: %v", cs)
		}
		<-time.After(5 * time.Millisecond) // polling XINFO: no event to wait on
	}

	// A sweep ran within the interval elsewhere: nothing is removed.
	if err := e.rdb.Set(ctx, e.key("q", "prune"), "1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	e.fetch(live, 1)
	if cs := consumers(t, e); len(cs) != 4 {
		t.Fatalf("consumers after a fetch while the prune key is held: %v, want all 4", cs)
	}

	if err := e.rdb.Del(ctx, e.key("q", "prune")).Err(); err != nil {
		t.Fatal(err)
	}
	e.fetch(live, 1)
	cs := consumers(t, e)
	names := make([]string, 0, len(cs))
	for n := range cs {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"crashed-holding", stream.ConsumerName(live)}; !slices.Equal(names, sortedCopy(want)) {
		t.Fatalf("consumers after a sweep: %v, want %v (log: %s)", names, sortedCopy(want), e.logs.find(slog.LevelWarn, "consumers"))
	}
}

// consumers returns the group's consumers of queue q with their idle times.
func consumers(t *testing.T, e *env) map[string]time.Duration {
	t.Helper()
	cs, err := e.rdb.XInfoConsumers(context.Background(), e.key("q", "stream"), "conveyor").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]time.Duration, len(cs))
	for _, c := range cs {
		out[c.Name] = c.Idle
	}
	return out
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
