package conveyor_test

import (
	"context"
	"errors"
	"testing"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestInspectorQueueSizes: QueueSizes reads the queues asked for, in the
// order asked, in one round trip, and refuses a bad name before sending
// anything.
func TestInspectorQueueSizes(t *testing.T) {
	t.Parallel()
	for _, dt := range drivertest.Durable {
		t.Run(dt.Name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.NewClient(t)
			d := dt.Must(t, rdb, redistest.Prefix(t))
			insp, err := conveyor.NewInspector(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			c, err := conveyor.NewClient(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for q, n := range map[string]int{"a": 1, "b": 2, "c": 3} {
				for range n {
					if _, err := c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{Queue: q}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := insp.QueueSizes(ctx, "a"); err != nil { // loads the script
				t.Fatal(err)
			}
			rt := &roundTrips{}
			rdb.AddHook(rt)
			s, err := insp.QueueSizes(ctx, "c", "never-used", "a")
			if err != nil {
				t.Fatal(err)
			}
			if n := rt.n.Load(); n != 1 {
				t.Errorf("QueueSizes of 3 queues took %d round trips, want 1", n)
			}
			if len(s) != 3 {
				t.Fatalf("QueueSizes returned %d sizes, want 3", len(s))
			}
			for k, want := range []struct {
				queue string
				ready int64
			}{{"c", 3}, {"never-used", 0}, {"a", 1}} {
				if s[k].Queue != want.queue || s[k].Ready != want.ready {
					t.Errorf("sizes[%d] = queue %q, ready %d; want %q, %d", k, s[k].Queue, s[k].Ready, want.queue, want.ready)
				}
			}
			if s, err := insp.QueueSizes(ctx); err != nil || s != nil {
				t.Errorf("QueueSizes() = %v, %v; want nil, nil", s, err)
			}
			before := rt.n.Load()
			if _, err := insp.QueueSizes(ctx, "a", "bad{name}"); !errors.Is(err, conveyor.ErrInvalidQueue) {
				t.Errorf("QueueSizes with a bad name: %v, want ErrInvalidQueue", err)
			}
			if n := rt.n.Load(); n != before {
				t.Errorf("QueueSizes with a bad name sent %d round trips, want none", n-before)
			}
		})
	}
}
