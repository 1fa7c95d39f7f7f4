package conveyor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// lossy returns a driver and a client whose only connection (go-redis's
// default MaxRetries, 3) goes through a proxy that can lose a reply, a
// direct client of the same server, and the proxy.
func lossy(t *testing.T, drv drivertest.Driver) (broker.Driver, *conveyor.Client, *redis.Client, *redistest.Proxy) {
	t.Helper()
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	d := drv.Must(t, rdb, "lossy")
	c, err := conveyor.NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Warm up through the proxy: the connection made, the scripts loaded,
	// the queue registered; so the next reply the server sends is the
	// answer to the command under test.
	for _, o := range []*conveyor.EnqueueOptions{{ID: "warm"}, {Delay: time.Hour, ID: "warm-timer"}} {
		if _, err := c.Enqueue(context.Background(), "warm", nil, o); err != nil {
			t.Fatal(err)
		}
	}
	return d, c, srv.Client(t), px
}

// TestLostReplyEnqueuesOnce: an Enqueue whose reply is lost after Redis
// ran it is not sent again: the job is stored once, and the call does not
// report its own job as a duplicate.
func TestLostReplyEnqueuesOnce(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			_, c, direct, px := lossy(t, drv)
			ctx := context.Background()
			px.DropReplyTo("plain")
			_, err := c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: "plain"})
			if n, lerr := drv.ReadyLen(ctx, direct, "lossy", "default"); lerr != nil || n != 2 {
				t.Fatalf("after a lost reply (Enqueue returned %v) the queue holds %d jobs (%v), want 2 (warm, plain)", err, n, lerr)
			}
			px.DropReplyTo("later")
			_, err = c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: "later", Delay: time.Hour})
			if errors.Is(err, conveyor.ErrDuplicate) {
				t.Fatalf("a delayed Enqueue whose reply was lost reported its own job as a duplicate: %v", err)
			}
			if n, lerr := direct.ZCard(ctx, "lossy:{default}:delayed").Result(); lerr != nil || n != 2 {
				t.Fatalf("timers after a lost reply: %d (%v), want 2 (warm-timer, later)", n, lerr)
			}
			// A unique job with a generated ID: the key it holds is its own.
			px.DropReplyTo("uk-lost")
			_, err = c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{UniqueKey: "uk-lost"})
			if errors.Is(err, conveyor.ErrDuplicate) {
				t.Fatalf("a unique Enqueue whose reply was lost reported its own job as a duplicate: %v", err)
			}
			if n, lerr := drv.ReadyLen(ctx, direct, "lossy", "default"); lerr != nil || n != 3 {
				t.Fatalf("after a lost reply (unique Enqueue returned %v) the queue holds %d jobs (%v), want 3 (warm, plain, unique)", err, n, lerr)
			}
			if got := px.Lost(); got != 3 {
				t.Fatalf("the proxy lost %d replies, want 3 (one per call under test)", got)
			}
		})
	}
}

// TestLostReplyAckLanded: an ack whose reply is lost after Redis ran it
// is reported as landed when tried again (as the pool does), not as a lost
// lease.
func TestLostReplyAckLanded(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			d, c, direct, px := lossy(t, drv)
			ctx := context.Background()
			cons, err := d.Open(ctx, "default", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close(ctx)
			if _, err := c.Enqueue(ctx, "k", nil, nil); err != nil {
				t.Fatal(err)
			}
			var ds []*broker.Delivery
			for len(ds) < 2 {
				got, err := cons.Fetch(ctx, 2-len(ds))
				if err != nil {
					t.Fatal(err)
				}
				ds = append(ds, got...)
			}
			if err := cons.Ack(ctx, ds[0]); err != nil { // the ack script loaded
				t.Fatal(err)
			}
			px.DropReplyTo(ds[1].Receipt)
			err = cons.Ack(ctx, ds[1])
			if err != nil {
				err = cons.Ack(ctx, ds[1]) // the pool tries an ack again after an error
			}
			if err != nil {
				t.Fatalf("an ack that landed, its reply lost, reported %v", err)
			}
			if n, lerr := drv.ReadyLen(ctx, direct, "lossy", "default"); lerr != nil || n != 0 {
				t.Fatalf("ready after the ack: %d, %v", n, lerr)
			}

		})
	}
}
