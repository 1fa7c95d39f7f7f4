package list_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestLostSettleReplyPastDeadline: a settle whose reply is lost after it
// landed, tried again after the delivery's LeaseDeadline (the reply was
// late, or the pool's retries outlasted the lease), is reported as landed,
// whether or not a fetch ran meanwhile. A settle whose lease a fetch
// reclaimed first (the lease ran out), its reply lost too, is reported as
// ErrLeaseLost when tried again, also before LeaseDeadline by the local
// clock: the driver does not guess from the time.
func TestLostSettleReplyPastDeadline(t *testing.T) {
	t.Parallel()
	settles := []struct {
		name   string
		settle func(broker.Consumer, *broker.Delivery) error
		// ready and dead: where the three settled messages (warm and the
		// two landed) are left.
		ready, dead int64
	}{
		{"ack", func(c broker.Consumer, d *broker.Delivery) error { return c.Ack(context.Background(), d) }, 0, 0},
		{"retry", func(c broker.Consumer, d *broker.Delivery) error {
			return c.Retry(context.Background(), d, time.Time{})
		}, 3, 0},
		{"release", func(c broker.Consumer, d *broker.Delivery) error { return c.Release(context.Background(), d) }, 3, 0},
		{"discard", func(c broker.Consumer, d *broker.Delivery) error {
			return c.Discard(context.Background(), d, "no")
		}, 0, 3},
	}
	for _, tc := range settles {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := redistest.StartServer(t)
			px := redistest.StartProxy(t, srv.Addr)
			var outage redistest.Outage
			rdb := redis.NewClient(&redis.Options{Addr: px.Addr, PoolSize: 1, Dialer: outage.Dial})
			t.Cleanup(func() { _ = rdb.Close() })
			direct := srv.Client(t)
			d, err := list.New(rdb, &list.Config{Prefix: "lossy"})
			if err != nil {
				t.Fatal(err)
			}
			e := &env{t: t, c: direct, d: d, prefix: "lossy"}
			e.enqueue(msg("q", "warm"), msg("q", "landed"), msg("q", "reclaimed"), msg("q", "landed-too"))
			// A short lease; nothing reclaims it until other fetches.
			cons := e.open("q", 200*time.Millisecond)
			other := e.open("q", time.Minute)
			ds := fetchN(t, cons, 4)
			if err := tc.settle(cons, ds[0]); err != nil { // the script loaded
				t.Fatal(err)
			}
			landed, reclaimed, landedToo := ds[1], ds[2], ds[3]
			loseReply(t, px, landed, func() error { return tc.settle(cons, landed) })
			loseReply(t, px, landedToo, func() error { return tc.settle(cons, landedToo) })
			if n, _ := direct.HExists(ctx, e.key("q", "inflight"), landed.Receipt).Result(); n {
				t.Fatalf("the %s whose reply was lost did not land", tc.name)
			}

			// Tried again while Redis cannot be reached (the lost reply
			// broke the client's one connection), as a worker's retries
			// are while Redis restarts: those tries say nothing.
			outage.Set(true)
			if err := tc.settle(cons, landed); err == nil || errors.Is(err, broker.ErrLeaseLost) {
				t.Fatalf("a %s while Redis cannot be reached: %v, want the connection's error", tc.name, err)
			}
			outage.Set(false)

			// Tried again past the deadline, no fetch between: landed.
			waitPast(landed.LeaseDeadline)
			if err := redistest.UntilConnected(t, func() error { return tc.settle(cons, landed) }); err != nil {
				t.Errorf("a %s that landed, its reply lost, tried again past LeaseDeadline (tries between could not connect): %v, want nil", tc.name, err)
			}

			// Another consumer's fetch reclaims the expired lease of
			// reclaimed; the settle sent after it does not land. The
			// lease runs out by the server's clock, which started it a
			// little after LeaseDeadline's local start.
			waitServerPast(t, direct, e.key("q", "lease"), reclaimed.Receipt)
			if got := fetch(t, other, 1); len(got) != 1 || got[0].ID != "reclaimed" || got[0].Recoveries != 1 {
				t.Fatalf("the other consumer fetched %v, want the reclaimed delivery", ids(got))
			}
			loseReply(t, px, reclaimed, func() error { return tc.settle(cons, reclaimed) })
			if err := tc.settle(cons, reclaimed); !errors.Is(err, broker.ErrLeaseLost) {
				t.Errorf("a doubted %s of a reclaimed delivery: %v, want ErrLeaseLost", tc.name, err)
			}
			// The same, with a local clock behind the server's: the
			// reclaim, not the clock, says the lease was lost.
			loseReply(t, px, reclaimed, func() error { return tc.settle(cons, reclaimed) })
			reclaimed.LeaseDeadline = time.Now().Add(time.Hour)
			if err := tc.settle(cons, reclaimed); !errors.Is(err, broker.ErrLeaseLost) {
				t.Errorf("a doubted %s of a reclaimed delivery before its LeaseDeadline: %v, want ErrLeaseLost", tc.name, err)
			}

			// A settle that landed before the reclaim ran is still landed.
			if err := tc.settle(cons, landedToo); err != nil {
				t.Errorf("a %s that landed, its reply lost, tried again after a reclaim: %v, want nil", tc.name, err)
			}
			// Without a doubt, a settle of a settled delivery is refused.
			if err := tc.settle(cons, landed); !errors.Is(err, broker.ErrLeaseLost) {
				t.Errorf("a second %s of a settled delivery: %v, want ErrLeaseLost", tc.name, err)
			}

			// The settled messages were settled once; only other holds one.
			if n := e.llen("q", "ready"); n != tc.ready {
				t.Errorf("%d ready, want %d", n, tc.ready)
			}
			if n := e.llen("q", "dead"); n != tc.dead {
				t.Errorf("%d discarded, want %d", n, tc.dead)
			}
			if n, _ := direct.HLen(ctx, e.key("q", "inflight")).Result(); n != 1 {
				t.Errorf("%d in flight, want 1 (the reclaimed one, redelivered)", n)
			}
		})
	}
}

// loseReply runs settle, of d, with its reply lost.
func loseReply(t *testing.T, px *redistest.Proxy, d *broker.Delivery, settle func() error) {
	t.Helper()
	px.DropReplyTo(d.Receipt)
	if err := settle(); err == nil {
		t.Fatalf("the proxy did not lose the reply to the settle of %s", d.ID)
	}
}

// waitServerPast returns once the server's clock is past the lease
// deadline of receipt in the lease ZSET key.
func waitServerPast(t *testing.T, c *redis.Client, key, receipt string) {
	t.Helper()
	ctx := context.Background()
	ms, err := c.ZScore(ctx, key, receipt).Result()
	if err != nil {
		t.Fatalf("the lease of %s: %v", receipt, err)
	}
	deadline := time.UnixMilli(int64(ms))
	for {
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.After(deadline) {
			return
		}
		<-time.After(deadline.Sub(now) + time.Millisecond)
	}
}

// waitPast returns once the local clock is past deadline.
func waitPast(deadline time.Time) {
	for !time.Now().After(deadline) {
		<-time.After(time.Until(deadline) + time.Millisecond)
	}
}
