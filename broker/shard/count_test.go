package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestCountChangeRefused: a queue first used with 6 partitions is refused
// (Enqueue, Open, EnqueueFire) by a Driver configured with 4 or with none,
// with a *CountError naming both counts, while the first Driver goes on; a
// queue that holds jobs stored whole is refused by a Driver that would
// split it; after DeleteQueue another count may be used.
func TestCountChangeRefused(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"list", "stream"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := redistest.Prefix(t)
			rdb := brokertest.Client(t)
			in := innerDriver(t, driver, rdb, prefix)
			split := func(n int) *shard.Driver {
				d, err := shard.New(in, shard.Config{Queues: map[string]int{"orders": n, "plain": n}})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			msg := func(q, id string) []*broker.Message {
				return []*broker.Message{{ID: id, Kind: "k", Queue: q}}
			}
			refused := func(what string, err error, recorded, configured int) {
				t.Helper()
				var ce *shard.CountError
				if !errors.As(err, &ce) || !errors.Is(err, shard.ErrCountChanged) || ce.Recorded != recorded || ce.Configured != configured {
					t.Fatalf("%s = %v; want a CountError of %d recorded, %d configured", what, err, recorded, configured)
				}
			}

			six := split(6)
			if err := six.Enqueue(ctx, msg("orders", "a")); err != nil {
				t.Fatal(err)
			}
			four := split(4)
			refused("Enqueue with 4 partitions", four.Enqueue(ctx, msg("orders", "b")), 6, 4)
			_, err := four.Open(ctx, "orders", nil)
			refused("Open with 4 partitions", err, 6, 4)
			whole, err := shard.New(in, shard.Config{})
			if err != nil {
				t.Fatal(err)
			}
			refused("Enqueue of a whole queue", whole.Enqueue(ctx, msg("orders", "c")), 6, 1)
			if err := six.Enqueue(ctx, msg("orders", "d")); err != nil {
				t.Fatalf("Enqueue with the recorded count after the refusals: %v", err)
			}

			// A queue used whole by the plain driver holds jobs: splitting
			// it is refused, and the refusal stays.
			if err := in.Enqueue(ctx, msg("plain", "p")); err != nil {
				t.Fatal(err)
			}
			refused("Enqueue splitting a queue that holds jobs stored whole", six.Enqueue(ctx, msg("plain", "q")), 1, 6)
			refused("the same again", split(6).Enqueue(ctx, msg("plain", "q")), 1, 6)

			// Deleted, the queue may be used with another count.
			if _, err := six.DeleteQueue(ctx, "orders", true); err != nil {
				t.Fatal(err)
			}
			if err := four.Enqueue(ctx, msg("orders", "e")); err != nil {
				t.Fatalf("Enqueue with 4 partitions after DeleteQueue: %v", err)
			}
			if got := four.Partitions("orders"); len(got) != 4 {
				t.Fatalf("Partitions = %q, want 4", got)
			}
		})
	}
}
