package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// lossy is a driver whose only connection goes through a proxy that can
// lose a reply, with a direct client of the same private server.
type lossy struct {
	*env
	px     *redistest.Proxy
	direct *redis.Client
}

func newLossy(t *testing.T, cfg *stream.Config) *lossy {
	t.Helper()
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return &lossy{env: newEnvWith(t, rdb, cfg), px: px, direct: srv.Client(t)}
}

// TestLostSettleReplyPastDeadline: a settle whose reply is lost after it
// landed, tried again after the delivery's LeaseDeadline (the reply was
// late, or the pool's retries outlasted the lease), finds its entry in
// neither the stream nor the group's pending list and is reported as
// landed. The same settle of an entry another consumer took over is
// reported as ErrLeaseLost, before the deadline too; an entry taken over
// and acked by that consumer is acked, and a doubted ack of it says so.
func TestLostSettleReplyPastDeadline(t *testing.T) {
	t.Parallel()
	settles := map[string]func(broker.Consumer, *broker.Delivery) error{
		"ack": func(c broker.Consumer, d *broker.Delivery) error { return c.Ack(context.Background(), d) },
		"retry": func(c broker.Consumer, d *broker.Delivery) error {
			return c.Retry(context.Background(), d, time.Time{})
		},
		"release": func(c broker.Consumer, d *broker.Delivery) error { return c.Release(context.Background(), d) },
		"discard": func(c broker.Consumer, d *broker.Delivery) error { return c.Discard(context.Background(), d, "no") },
	}
	for name, settle := range settles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLossy(t, nil)
			ctx := context.Background()
			l.enqueue(msg("q", "warm"), msg("q", "landed"), msg("q", "taken"), msg("q", "taken-acked"))
			cons := l.open("q", time.Minute)
			other := l.open("q", time.Minute)
			ds := l.fetch(cons, 4)
			if len(ds) != 4 {
				t.Fatalf("fetched %v, want 4", ids(ds))
			}
			if err := settle(cons, ds[0]); err != nil { // the script loaded
				t.Fatal(err)
			}

			// Landed, its reply lost; tried again past the deadline.
			landed := ds[1]
			l.loseReply(t, landed, func() error { return settle(cons, landed) })
			if p, _ := l.direct.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: l.key("q", "stream"), Group: "conveyor",
				Start: landed.Receipt, End: landed.Receipt, Count: 1}).Result(); len(p) != 0 {
				t.Fatalf("the %s whose reply was lost did not land: %v", name, p)
			}
			landed.LeaseDeadline = time.Now().Add(-time.Second)
			if err := settle(cons, landed); err != nil {
				t.Fatalf("a %s that landed, its reply lost, tried again past LeaseDeadline: %v, want nil", name, err)
			}

			// Taken over by another consumer (its lease ran out): the
			// doubted settle did not land, and says so even before the
			// deadline.
			taken := ds[2]
			takeOver(t, l, taken, stream.ConsumerName(other))
			l.loseReply(t, taken, func() error { return settle(cons, taken) })
			if err := settle(cons, taken); !errors.Is(err, broker.ErrLeaseLost) {
				t.Fatalf("a doubted %s of an entry another consumer holds: %v, want ErrLeaseLost", name, err)
			}

			// Taken over and acked by the other consumer: nobody holds
			// the entry, it was settled.
			acked := ds[3]
			takeOver(t, l, acked, stream.ConsumerName(other))
			l.loseReply(t, acked, func() error { return settle(cons, acked) })
			took := *acked
			took.Token = acked.Receipt + "/2"
			if err := other.Ack(ctx, &took); err != nil {
				t.Fatal(err)
			}
			acked.LeaseDeadline = time.Now().Add(-time.Second)
			if err := settle(cons, acked); err != nil {
				t.Fatalf("a doubted %s of an entry another consumer acked: %v, want nil", name, err)
			}

			// Without a doubt, a settle of a settled entry is refused.
			if err := settle(cons, landed); !errors.Is(err, broker.ErrLeaseLost) {
				t.Fatalf("a second %s of a settled delivery: %v, want ErrLeaseLost", name, err)
			}
		})
	}
}

// loseReply runs settle, of d, with its reply lost.
func (l *lossy) loseReply(t *testing.T, d *broker.Delivery, settle func() error) {
	t.Helper()
	l.px.DropReplyTo(d.Receipt)
	if err := settle(); err == nil {
		t.Fatal("the proxy did not lose the reply")
	}
}

// takeOver hands d's entry to consumer to, as a reclaim after its lease ran
// out does (delivery count + 1).
func takeOver(t *testing.T, l *lossy, d *broker.Delivery, to string) {
	t.Helper()
	err := l.direct.XClaim(context.Background(), &redis.XClaimArgs{
		Stream: l.key("q", "stream"), Group: "conveyor", Consumer: to, MinIdle: 0, Messages: []string{d.Receipt},
	}).Err()
	if err != nil {
		t.Fatal(err)
	}
}
