package conveyor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestDiscardIntoABrokenListKeepsTheJob: Redis keeps what a script wrote
// before a command of it failed, so a Discard whose discard list holds
// another type (written by hand) must fail with the job still leased, not
// after taking it off its lease or out of the stream. Once the key is
// mended the same delivery is discarded.
func TestDiscardIntoABrokenListKeepsTheJob(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			d := drv.Must(t, rdb, prefix)
			if err := d.Enqueue(ctx, []*broker.Message{{ID: "a", Kind: "k", Queue: "q", Payload: []byte("p")}}); err != nil {
				t.Fatal(err)
			}
			c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ds, err := c.Fetch(fctx, 1)
			cancel()
			if err != nil || len(ds) != 1 {
				t.Fatalf("Fetch = %v, %v", ds, err)
			}
			dead := discards.QueueKeys(prefix, "q").Dead
			if err := rdb.Set(ctx, dead, "not a list", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Discard(ctx, ds[0], "bad"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("Discard into a discard list of another type = %v, want its WRONGTYPE", err)
			}
			if err := rdb.Del(ctx, dead).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Discard(ctx, ds[0], "bad"); err != nil {
				t.Fatalf("Discard after the key was mended: %v (the job was no longer leased)", err)
			}
			if n, err := rdb.LLen(ctx, dead).Result(); err != nil || n != 1 {
				t.Fatalf("discarded: %d (%v), want 1", n, err)
			}
		})
	}
}
