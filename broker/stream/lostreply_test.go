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
	name   string // the client name of the driver's connection
	lostBy broker.Consumer
	// outage, while on, makes the driver's client fail to connect, as it
	// does while Redis is down (a lost reply breaks its one connection).
	outage redistest.Outage
}

func newLossy(t *testing.T, cfg *stream.Config) *lossy {
	t.Helper()
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	name := randomName()
	l := &lossy{px: px, direct: srv.Client(t), name: name}
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr, PoolSize: 1, ClientName: name, Dialer: l.outage.Dial})
	t.Cleanup(func() { _ = rdb.Close() })
	l.env = newEnvWith(t, rdb, cfg)
	return l
}

// settles are the four ways to settle a delivery, by name.
var settles = map[string]func(broker.Consumer, *broker.Delivery) error{
	"ack": func(c broker.Consumer, d *broker.Delivery) error { return c.Ack(context.Background(), d) },
	"retry": func(c broker.Consumer, d *broker.Delivery) error {
		return c.Retry(context.Background(), d, time.Time{})
	},
	"release": func(c broker.Consumer, d *broker.Delivery) error { return c.Release(context.Background(), d) },
	"discard": func(c broker.Consumer, d *broker.Delivery) error { return c.Discard(context.Background(), d, "no") },
}

// TestLostSettleReplyPastDeadline: a settle whose reply is lost after it
// landed, tried again after the delivery's LeaseDeadline (the reply was
// late, or the pool's retries outlasted the lease), finds its entry in
// neither the stream nor the group's pending list and is reported as
// landed. The same settle of an entry another consumer took over is
// reported as ErrLeaseLost, before the deadline too (and once that
// consumer settled it: TestDoubtedSettleOfEntryTakenOverAndSettled).
func TestLostSettleReplyPastDeadline(t *testing.T) {
	t.Parallel()
	for name, settle := range settles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLossy(t, nil)
			ctx := context.Background()
			l.enqueue(msg("q", "warm"), msg("q", "landed"), msg("q", "taken"))
			cons := l.open("q", time.Minute)
			other := l.open("q", time.Minute)
			ds := l.fetch(cons, 3)
			if len(ds) != 3 {
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
			// Tried again while Redis cannot be reached (the connection
			// the lost reply broke cannot be made again), as a worker's
			// retries do while Redis restarts: that try says nothing.
			l.outage.Set(true)
			if err := settle(cons, landed); err == nil || errors.Is(err, broker.ErrLeaseLost) {
				t.Fatalf("a %s while Redis cannot be reached: %v, want the connection's error", name, err)
			}
			l.outage.Set(false)
			landed.LeaseDeadline = time.Now().Add(-time.Second)
			// Tries until the client connects again did not run either.
			if err := redistest.UntilConnected(t, func() error { return settle(cons, landed) }); err != nil {
				t.Fatalf("a %s that landed, its reply lost, tried again past LeaseDeadline (tries between could not connect): %v, want nil", name, err)
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

// TestLostFetchReplyCountsNoRecovery: a fetch whose reply is lost after
// Redis ran it (its entries are in this consumer's pending list, its caller
// never saw them) does not leave them there until the visibility timeout,
// to come back counted as a crash recovery: the consumer's next fetch hands
// them back, and they are delivered with no recovery and no attempt
// counted. Deliveries the consumer handed out and still holds keep their
// leases.
func TestLostFetchReplyCountsNoRecovery(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// lose runs a fetch of cons whose reply is lost; the entry "lost"
		// is in the stream when it returns, if not before.
		lose func(t *testing.T, l *lossy, cons broker.Consumer)
	}{
		{"read", func(t *testing.T, l *lossy, cons broker.Consumer) {
			l.enqueue(msg("q", "lost"))
			l.px.DropReplyTo("xreadgroup")
			l.fetchFails(t, cons)
		}},
		{"blocking read", func(t *testing.T, l *lossy, cons broker.Consumer) {
			l.px.DropReplyTo("block") // the blocking XREADGROUP's argument
			done := make(chan struct{})
			go func() {
				defer close(done)
				l.fetchFails(t, cons)
			}()
			waitBlocked(t, l.direct, l.name, "xreadgroup")
			d, err := stream.New(l.direct, &stream.Config{Prefix: l.prefix})
			if err != nil {
				t.Error(err)
			} else if err := d.Enqueue(context.Background(), []*broker.Message{msg("q", "lost")}); err != nil {
				t.Error(err)
			}
			<-done
		}},
		{"fetch script", func(t *testing.T, l *lossy, cons broker.Consumer) {
			l.enqueue(msg("q", "lost"))
			// A new consumer's first round runs fetch.lua (it takes over
			// expired leases first), which names the consumer.
			fresh := l.open("q", time.Hour)
			l.px.DropReplyTo(stream.ConsumerName(fresh))
			l.fetchFails(t, fresh)
			l.lostBy = fresh
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// No poll and no takeover for an hour: only the consumer that
			// lost the reply can bring the entry back in time.
			l := newLossy(t, &stream.Config{PollInterval: time.Hour})
			cons := l.open("q", time.Hour)
			l.enqueue(msg("q", "warm"), msg("q", "held"))
			ds := l.fetch(cons, 2) // fetch.lua loaded; then plain reads
			if len(ds) != 2 {
				t.Fatalf("fetched %v", ids(ds))
			}
			if err := cons.Ack(context.Background(), ds[0]); err != nil {
				t.Fatal(err)
			}
			held := ds[1]
			l.lostBy = cons

			tc.lose(t, l, cons)
			if t.Failed() {
				return
			}
			got := l.fetch(l.lostBy, 1)[0]
			if got.ID != "lost" || got.Recoveries != 0 || got.Retries != 0 {
				t.Fatalf("after the lost fetch: %s with %d recoveries, attempt %d; want lost, 0, 0", got.ID, got.Recoveries, got.Retries)
			}
			if owner, count, _, ok := l.pending("q", held.Receipt); !ok || owner != stream.ConsumerName(cons) || count != 1 {
				t.Fatalf("the delivery the consumer held: pending %v, owner %q, count %d", ok, owner, count)
			}
			ctx := context.Background()
			if err := cons.Ack(ctx, held); err != nil {
				t.Fatalf("ack of the held delivery: %v", err)
			}
			if err := l.lostBy.Ack(ctx, got); err != nil {
				t.Fatalf("ack of the recovered delivery: %v", err)
			}
			if !redistest.DrainedStream(t, l.direct, l.key("q", "stream")) {
				t.Fatal("the stream holds entries after every job was acked")
			}
		})
	}
}

// fetchFails runs a fetch that must fail (its reply lost).
func (l *lossy) fetchFails(t *testing.T, c broker.Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if ds, err := c.Fetch(ctx, 1); err == nil || ctx.Err() != nil {
		t.Errorf("a fetch whose reply was lost returned %v, %v; want the connection's error at once", ids(ds), err)
	}
}

// TestLostFetchAfterOwnTakeoverKeepsRunningDelivery: a consumer takes over
// its own expired lease (the entry is handed out a second time under the
// same ID) and the first delivery's settle is refused. A later read whose
// reply is lost must not hand back the second delivery, which still runs:
// it stays pending for the consumer and its ack lands.
func TestLostFetchAfterOwnTakeoverKeepsRunningDelivery(t *testing.T) {
	t.Parallel()
	l := newLossy(t, &stream.Config{PollInterval: 20 * time.Millisecond})
	cons := l.open("q", 100*time.Millisecond)
	l.enqueue(msg("q", "x"))
	first := l.fetch(cons, 1)[0]

	// The lease runs out; the next takeover pass of the same consumer
	// hands the entry out again.
	var second *broker.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for second == nil && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ds, err := cons.Fetch(ctx, 1)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			second = ds[0]
		}
	}
	if second == nil || second.ID != "x" || second.Receipt != first.Receipt || second.Token == first.Token {
		t.Fatalf("no second delivery of x under its first receipt %s: %+v", first.Receipt, second)
	}
	ctx := context.Background()
	if err := cons.Ack(ctx, first); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("ack of the first delivery: %v, want ErrLeaseLost", err)
	}

	l.enqueue(msg("q", "lost"))
	l.px.DropReplyTo(stream.ConsumerName(cons))
	l.fetchFails(t, cons)
	if t.Failed() {
		return
	}
	got := l.fetch(cons, 1)[0]
	if got.ID != "lost" {
		t.Fatalf("after the lost fetch: %s, want lost", got.ID)
	}
	if owner, count, _, ok := l.pending("q", second.Receipt); !ok || owner != stream.ConsumerName(cons) || count != 2 {
		t.Fatalf("the second delivery of x: pending %v, owner %q, count %d; want pending for %s with count 2", ok, owner, count, stream.ConsumerName(cons))
	}
	if err := cons.Ack(ctx, second, got); err != nil {
		t.Fatalf("ack of the running deliveries: %v", err)
	}
}

// TestDoubtedSettleOfEntryTakenOverAndSettled: a consumer's lease runs out,
// another consumer's fetch takes the entry over, and the first consumer's
// settle is refused with its reply lost. Once the other consumer has acked
// the entry, nobody holds it and it is gone from the stream; the first
// consumer's settle, tried again, must still hear ErrLeaseLost: its run was
// not the one that settled the job.
func TestDoubtedSettleOfEntryTakenOverAndSettled(t *testing.T) {
	t.Parallel()
	for name, settle := range settles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLossy(t, &stream.Config{PollInterval: 20 * time.Millisecond})
			ctx := context.Background()
			l.enqueue(msg("q", "warm"), msg("q", "x"))
			cons := l.open("q", time.Hour)
			ds := l.fetch(cons, 2)
			if len(ds) != 2 {
				t.Fatalf("fetched %v, want 2", ids(ds))
			}
			if err := settle(cons, ds[0]); err != nil { // the script loaded
				t.Fatal(err)
			}
			first := ds[1]

			// other's lease is short: its takeover pass claims x once x
			// has been idle that long.
			other := l.open("q", 50*time.Millisecond)
			var took *broker.Delivery
			for deadline := time.Now().Add(10 * time.Second); took == nil && time.Now().Before(deadline); {
				fctx, cancel := context.WithTimeout(ctx, time.Second)
				got, err := other.Fetch(fctx, 1)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
				if len(got) == 1 && got[0].ID == "x" {
					took = got[0]
				} else if len(got) == 1 { // warm, stored again by a retry or release
					if err := other.Ack(ctx, got[0]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if took == nil || took.Recoveries != 1 {
				t.Fatalf("the other consumer's takeover of x: %+v", took)
			}

			l.loseReply(t, first, func() error { return settle(cons, first) })
			if err := other.Ack(ctx, took); err != nil {
				t.Fatalf("the taker's ack: %v", err)
			}
			if err := settle(cons, first); !errors.Is(err, broker.ErrLeaseLost) {
				t.Fatalf("a doubted %s of an entry taken over and acked by another consumer: %v, want ErrLeaseLost", name, err)
			}
		})
	}
}
