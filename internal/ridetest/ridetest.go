// Package ridetest checks when a driver lets acks ride in fetches' round
// trips (internal/script.Bus), for the drivers' own tests.
package ridetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/script"
)

// AcksRide checks when a consumer of d lets an ack of n deliveries ride in
// its next fetch's round trip (rides reports whether it would, ride makes
// it willing, as RideAcks does): only once asked, while fetches come back
// full (a backlog), and for at most script.RideItems deliveries.
func AcksRide(t *testing.T, d broker.Driver, rides func(c broker.Consumer, n int) bool, ride func(c broker.Consumer)) {
	t.Helper()
	ctx := context.Background()
	var msgs []*broker.Message
	for i := range 100 {
		msgs = append(msgs, &broker.Message{ID: fmt.Sprint("m", i), Queue: "q", Kind: "k", EnqueuedAt: time.Now()})
	}
	if err := d.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for range 2 { // full fetches, more left: a backlog
		if ds, err := c.Fetch(ctx, 10); err != nil || len(ds) != 10 {
			t.Fatalf("Fetch = %d, %v; want 10", len(ds), err)
		}
	}
	if rides(c, 10) {
		t.Fatal("an ack rides before RideAcks")
	}
	ride(c)
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
