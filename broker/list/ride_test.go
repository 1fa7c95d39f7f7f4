package list

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// TestAcksRideOnlyWhenAsked: a consumer lets an ack ride in its next
// fetch's round trip only once asked (RideAcks), while fetches come back
// full (a backlog), and for at most script.RideItems deliveries.
func TestAcksRideOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := New(redistest.Client(t), &Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	rides := func(c *consumer, n int) bool {
		_, alone := c.ackVia(n).(redis.UniversalClient)
		return !alone
	}
	var msgs []*broker.Message
	for i := range 100 {
		msgs = append(msgs, &broker.Message{ID: fmt.Sprint("m", i), Queue: "q", Kind: "k", EnqueuedAt: time.Now()})
	}
	if err := d.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	bc, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close(ctx)
	c := bc.(*consumer)
	for range 2 { // full fetches, more left: a backlog
		if ds, err := c.Fetch(ctx, 10); err != nil || len(ds) != 10 {
			t.Fatalf("Fetch = %d, %v; want 10", len(ds), err)
		}
	}
	if rides(c, 10) {
		t.Fatal("an ack rides before RideAcks")
	}
	c.RideAcks()
	if !rides(c, 10) {
		t.Fatal("an ack does not ride after RideAcks and two full fetches")
	}
	if rides(c, script.RideItems+1) {
		t.Fatalf("an ack of %d deliveries rides", script.RideItems+1)
	}
	if ds, err := c.Fetch(ctx, 100); err != nil || len(ds) != 80 {
		t.Fatalf("Fetch = %d, %v; want the 80 left", len(ds), err)
	}
	if rides(c, 10) {
		t.Fatal("an ack rides after a fetch that was not full")
	}
}
