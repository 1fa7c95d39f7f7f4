package pubsub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func newDriver(t *testing.T, cfg *pubsub.Config) *pubsub.Driver {
	t.Helper()
	d, err := pubsub.New(redistest.Client(t), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		return newDriver(t, &pubsub.Config{Prefix: prefix})
	})
}

// TestConformanceSharded runs the suite on SPUBLISH/SSUBSCRIBE, which Redis
// 7 serves on a single node too, so the sharded path is proven without a
// cluster.
func TestConformanceSharded(t *testing.T) {
	t.Parallel()
	sharded := true
	brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
		d := newDriver(t, &pubsub.Config{Prefix: prefix, Sharded: &sharded})
		if !d.Sharded() {
			t.Fatal("Config.Sharded = true did not select sharded pub/sub")
		}
		return d
	})
}

// TestEveryConsumerGetsEveryMessage: three subscribers each receive all of
// 1,000 messages published in one pipelined Enqueue, in publish order.
func TestEveryConsumerGetsEveryMessage(t *testing.T) {
	t.Parallel()
	const q, total = "fan", 1000
	d := newDriver(t, &pubsub.Config{Prefix: redistest.Prefix(t)})
	cs := make([]broker.Consumer, 3)
	for i := range cs {
		cs[i] = brokertest.Open(t, d, q, nil)
	}
	msgs := make([]*broker.Message, total)
	for i := range msgs {
		msgs[i] = brokertest.NewMessage(q, i)
	}
	brokertest.Enqueue(t, d, msgs...)
	for ci, c := range cs {
		ds := brokertest.FetchN(t, c, total, 128, 10*time.Second)
		for i, dl := range ds {
			if dl.ID != msgs[i].ID {
				t.Fatalf("consumer %d: delivery %d is %s, want %s", ci, i, dl.ID, msgs[i].ID)
			}
		}
		brokertest.ExpectNone(t, c, 100*time.Millisecond)
	}
}

// TestMalformedDropped: a message that does not decode is counted and
// skipped, and the next good one is delivered.
func TestMalformedDropped(t *testing.T) {
	t.Parallel()
	const q = "garbage"
	prefix := redistest.Prefix(t)
	d := newDriver(t, &pubsub.Config{Prefix: prefix})
	c := brokertest.Open(t, d, q, nil)
	ctx := brokertest.Context(t, 10*time.Second)
	rdb, ch := redistest.Client(t), keys.Channel(prefix, q)
	publish := rdb.Publish
	if d.Sharded() {
		publish = rdb.SPublish
	}
	if err := publish(ctx, ch, "not a message").Err(); err != nil {
		t.Fatal(err)
	}
	m := brokertest.NewMessage(q, 1)
	brokertest.Enqueue(t, d, m)
	if got := brokertest.FetchOne(t, c, 5*time.Second); got.ID != m.ID {
		t.Fatalf("fetched %s, want %s", got.ID, m.ID)
	}
	if n := c.(*pubsub.Consumer).Malformed(); n != 1 {
		t.Fatalf("Malformed() = %d, want 1", n)
	}
}

// TestNotSubscribedIsLost documents at-most-once: a message published before
// Open is not delivered.
func TestNotSubscribedIsLost(t *testing.T) {
	t.Parallel()
	const q = "late"
	d := newDriver(t, &pubsub.Config{Prefix: redistest.Prefix(t)})
	brokertest.Enqueue(t, d, brokertest.NewMessage(q, 1))
	c := brokertest.Open(t, d, q, nil)
	brokertest.ExpectNone(t, c, 200*time.Millisecond)
	m := brokertest.NewMessage(q, 2)
	brokertest.Enqueue(t, d, m)
	if got := brokertest.FetchOne(t, c, 5*time.Second); got.ID != m.ID {
		t.Fatalf("fetched %s, want %s", got.ID, m.ID)
	}
}

// TestEnqueueStampsEnqueuedAt: a message without EnqueuedAt is stamped on
// the way out, and the caller's message is left as it was.
func TestEnqueueStampsEnqueuedAt(t *testing.T) {
	t.Parallel()
	const q = "stamp"
	d := newDriver(t, &pubsub.Config{Prefix: redistest.Prefix(t)})
	c := brokertest.Open(t, d, q, nil)
	m := brokertest.NewMessage(q, 1)
	m.EnqueuedAt = time.Time{}
	before := time.Now().Truncate(time.Millisecond)
	brokertest.Enqueue(t, d, m)
	got := brokertest.FetchOne(t, c, 5*time.Second)
	if got.EnqueuedAt.Before(before) || got.EnqueuedAt.After(time.Now()) {
		t.Fatalf("EnqueuedAt = %v, want the time of Enqueue (after %v)", got.EnqueuedAt, before)
	}
	if !m.EnqueuedAt.IsZero() {
		t.Fatalf("Enqueue changed the caller's message: EnqueuedAt = %v", m.EnqueuedAt)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	for name, cfg := range map[string]*pubsub.Config{
		"negative buffer": {Buffer: -1},
		"brace prefix":    {Prefix: "a{b"},
		"space prefix":    {Prefix: "a b"},
	} {
		if _, err := pubsub.New(c, cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if _, err := pubsub.New(nil, nil); err == nil {
		t.Error("New accepted a nil client")
	}
	d, err := pubsub.New(c, nil)
	if err != nil {
		t.Fatalf("New with nil config: %v", err)
	}
	if d.Sharded() != redistest.IsCluster() {
		t.Errorf("Sharded() = %v on a client with cluster = %v", d.Sharded(), redistest.IsCluster())
	}
}

// TestOpenCancelled: Open with a done context fails with the context's
// error and subscribes nothing.
func TestOpenCancelled(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	d := newDriver(t, &pubsub.Config{Prefix: prefix})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := d.Open(ctx, "q", nil)
	if !errors.Is(err, context.Canceled) || c != nil {
		t.Fatalf("Open with a cancelled context = %v, %v; want nil, context.Canceled", c, err)
	}
	waitSubscribers(t, keys.Channel(prefix, "q"), 0)
}

// TestCloseUnsubscribes: Open subscribes exactly one connection to the
// queue's channel and Close removes it.
func TestCloseUnsubscribes(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	d := newDriver(t, &pubsub.Config{Prefix: prefix})
	ch := keys.Channel(prefix, "q")
	c := brokertest.Open(t, d, "q", nil)
	waitSubscribers(t, ch, 1)
	if err := c.Close(brokertest.Context(t, 5*time.Second)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitSubscribers(t, ch, 0)
	if err := c.Close(brokertest.Context(t, 5*time.Second)); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("second Close = %v, want broker.ErrClosed", err)
	}
}

// waitSubscribers waits until channel has want subscribers (PUBSUB NUMSUB
// on a single server; a cluster's sharded count is not asked here).
// Redis applies an UNSUBSCRIBE from another connection in its own time, so
// the count is read until it matches or two seconds pass.
func waitSubscribers(t *testing.T, channel string, want int64) {
	t.Helper()
	if redistest.IsCluster() {
		return
	}
	ctx := brokertest.Context(t, 2*time.Second)
	rdb := redistest.Client(t)
	var got int64
	for ctx.Err() == nil {
		n, err := rdb.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			break
		}
		if got = n[channel]; got == want {
			return
		}
	}
	t.Fatalf("%s has %d subscribers, want %d", channel, got, want)
}
