package queueprobe

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestSplitQueue: a queue a shard.Driver split into 4 partitions is listed
// once under its own name (its partitions are not), probed as one queue
// (its driver, its count, paused when its partitions are), and read,
// written and paused through a shard.Driver of its recorded count.
func TestSplitQueue(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"list", "stream"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			dt, _ := drivertest.Named(driver)
			d, err := shard.New(dt.Must(t, rdb, prefix), shard.Config{Queues: map[string]int{"orders": 4}})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []*broker.Message
			for i := range 8 {
				msgs = append(msgs, &broker.Message{ID: fmt.Sprintf("o%d", i), Kind: "k", Queue: "orders"})
			}
			msgs = append(msgs, &broker.Message{ID: "p", Kind: "k", Queue: "plain"})
			if err := d.Enqueue(ctx, msgs); err != nil {
				t.Fatal(err)
			}

			s, err := New(rdb, &Config{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			names, err := s.Queues(ctx)
			if err != nil || !slices.Equal(names, []string{"orders", "plain"}) {
				t.Fatalf("Queues = %q, %v; want [orders plain] (no partition listed)", names, err)
			}
			qs, err := s.Probe(ctx, "orders")
			if want := (Queue{Name: "orders", Driver: driver, Known: true, Partitions: 4}); err != nil || qs[0] != want {
				t.Fatalf("Probe(orders) = %+v, %v; want %+v", qs, err, want)
			}
			insp, q, err := s.Open(ctx, "orders", true, false)
			if err != nil {
				t.Fatal(err)
			}
			sizes, err := insp.QueueSizes(ctx, "orders")
			if err != nil || sizes[0].Ready != 8 {
				t.Fatalf("QueueSizes(orders) through Open's Inspector = %+v, %v; want 8 ready", sizes, err)
			}
			c, err := conveyor.NewClient(s.DriverFor(q), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{Queue: "orders"}); err != nil {
				t.Fatalf("Enqueue through DriverFor: %v", err)
			}
			figs, err := s.Overview(ctx)
			if err != nil || len(figs) != 2 || figs[0].Name != "orders" || figs[0].Ready != 9 || figs[1].Name != "plain" || figs[1].Ready != 1 {
				t.Fatalf("Overview = %+v, %v; want orders with 9 ready and plain with 1", figs, err)
			}
			if err := insp.Pause(ctx, "orders"); err != nil {
				t.Fatal(err)
			}
			if qs, err := s.Probe(ctx, "orders"); err != nil || !qs[0].Paused {
				t.Fatalf("Probe(orders) after Pause = %+v, %v; want paused", qs, err)
			}
		})
	}
}
