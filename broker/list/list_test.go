package list_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestRoundTripFIFOAndKeysGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	enq := time.UnixMilli(1_700_000_000_123)
	first := &broker.Message{
		ID: "a", Kind: "email", Queue: "q", Payload: []byte{0, 1, 2, 255},
		Headers: map[string]string{"traceparent": "00-abc", "k": ""}, MaxAttempts: 7,
		Timeout: 1500 * time.Millisecond, EnqueuedAt: enq,
	}
	e.enqueue(first, msg("q", "b"))
	e.enqueue(msg("q", "c"))

	c := e.open("q", 30*time.Second)
	before := time.Now()
	ds := fetchN(t, c, 3)
	if got := ids(ds); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("fetched %v, want FIFO [a b c]", got)
	}
	d := ds[0]
	if d.Kind != "email" || d.Queue != "q" || string(d.Payload) != "\x00\x01\x02\xff" ||
		d.Headers["traceparent"] != "00-abc" || len(d.Headers) != 2 || d.MaxAttempts != 7 ||
		d.Timeout != 1500*time.Millisecond || !d.EnqueuedAt.Equal(enq) || d.Retries != 0 || d.Recoveries != 0 {
		t.Fatalf("fetched message differs from the enqueued one: %+v", d.Message)
	}
	if !strings.HasSuffix(d.Receipt, ",1:a") || d.Token+",1:a" != d.Receipt || e.deliveries("q", d) != 1 {
		t.Fatalf("receipt %q token %q, want <token>,1:a, deliveries 1", d.Receipt, d.Token)
	}
	// Redis and this process share a clock here; allow 2s of slack.
	if lo, hi := before.Add(28*time.Second), time.Now().Add(32*time.Second); d.LeaseDeadline.Before(lo) || d.LeaseDeadline.After(hi) {
		t.Fatalf("lease deadline %v not about 30s from now", d.LeaseDeadline)
	}
	if ds[1].EnqueuedAt.IsZero() {
		t.Fatal("Enqueue did not stamp EnqueuedAt on a message without one")
	}
	if n, _ := e.c.ZCard(ctx, e.key("q", "lease")).Result(); n != 3 {
		t.Fatalf("leases: %d, want 3", n)
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if ks := redistest.Keys(t, e.c, e.prefix); len(ks) != 0 {
		t.Fatalf("keys left after every message was acked: %v", ks)
	}
}

// TestBatchAckReportsOnlyTheLost: a batch with one lost lease (gone, as a
// reclaim leaves it, or a token that is not its receipt's) acks the others
// and reports only that one.
func TestBatchAckReportsOnlyTheLost(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"reclaimed", "forged token"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			ctx := context.Background()
			e.enqueue(msg("q", "a"), msg("q", "b"), msg("q", "c"))
			c := e.open("q", time.Minute)
			ds := fetchN(t, c, 3)
			lost := *ds[1]
			wantInFlight := int64(1) // b's lease stays when only its token was forged
			if how == "reclaimed" {
				e.dropLease("q", &lost)
				wantInFlight = 0
			} else {
				lost.Token = "99"
			}
			err := c.Ack(ctx, ds[0], &lost, ds[2])
			var de *broker.DeliveryError
			if !errors.Is(err, broker.ErrLeaseLost) || !errors.As(err, &de) || de.Delivery != &lost {
				t.Fatalf("ack: %v, want one ErrLeaseLost for b", err)
			}
			if me, ok := err.(interface{ WrappedErrors() []error }); !ok || len(me.WrappedErrors()) != 1 {
				t.Fatalf("ack: %v, want exactly one error", err)
			}
			if n, _ := e.c.ZCard(ctx, e.key("q", "lease")).Result(); n != wantInFlight {
				t.Fatalf("in flight after a partial ack: %d, want %d", n, wantInFlight)
			}
		})
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &list.Config{MaxLen: 3})
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"))
	err := e.d.Enqueue(ctx, []*broker.Message{msg("q", "c"), msg("q", "d")})
	if !errors.Is(err, broker.ErrQueueFull) {
		t.Fatalf("enqueue past the cap: %v, want ErrQueueFull", err)
	}
	if n := e.llen("q", "ready"); n != 2 {
		t.Fatalf("ready holds %d after a refused batch, want 2 (all or nothing)", n)
	}
	// In-flight messages count against the cap too.
	c := e.open("q", time.Minute)
	ds := fetchN(t, c, 2)
	if err := e.d.Enqueue(ctx, []*broker.Message{msg("q", "c"), msg("q", "d")}); !errors.Is(err, broker.ErrQueueFull) {
		t.Fatalf("enqueue with two in flight: %v, want ErrQueueFull", err)
	}
	e.enqueue(msg("q", "c"))
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	e.enqueue(msg("q", "d"), msg("q", "e"))
}

func TestInvalidMessageStoresNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	bad := msg("q", "b")
	bad.Kind = ""
	err := e.d.Enqueue(context.Background(), []*broker.Message{msg("q", "a"), msg("other", "x"), bad})
	if !errors.Is(err, broker.ErrInvalidMessage) {
		t.Fatalf("enqueue: %v, want ErrInvalidMessage", err)
	}
	if ks := redistest.Keys(t, e.c, e.prefix); len(ks) != 0 {
		t.Fatalf("keys written despite an invalid message: %v", ks)
	}
	badQueue := msg("q{x}", "a")
	if err := e.d.Enqueue(context.Background(), []*broker.Message{badQueue}); !errors.Is(err, broker.ErrInvalidQueue) {
		t.Fatalf("enqueue to q{x}: %v, want ErrInvalidQueue", err)
	}
}

func TestEnqueueManyQueuesInOneCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &list.Config{MaxLen: 2})
	ctx := context.Background()
	e.enqueue(msg("full", "x"), msg("full", "y"))
	err := e.d.Enqueue(ctx, []*broker.Message{
		msg("a", "1"), msg("b", "1"), msg("a", "2"), msg("full", "z"), msg("b", "2"),
	})
	if !errors.Is(err, broker.ErrQueueFull) {
		t.Fatalf("enqueue: %v, want ErrQueueFull for queue full", err)
	}
	for q, want := range map[string][]string{"a": {"1", "2"}, "b": {"1", "2"}, "full": {"x", "y"}} {
		c := e.open(q, time.Minute)
		if got := ids(fetch(t, c, 10)); !slices.Equal(got, want) {
			t.Errorf("queue %s: %v, want %v", q, got, want)
		}
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"))
	c := e.open("q", time.Minute)
	a := fetch(t, c, 1)[0]
	// Due now: the back of the queue, behind b.
	if err := c.Retry(ctx, a, time.Time{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	ds := fetchN(t, c, 2)
	if got := ids(ds); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("after retry: %v, want [b a]", got)
	}
	if ds[1].Retries != 1 || ds[1].Recoveries != 0 || e.deliveries("q", ds[1]) != 2 || ds[1].Token == a.Token {
		t.Fatalf("retried message: attempt %d recoveries %d token %s (first %s)", ds[1].Retries, ds[1].Recoveries, ds[1].Token, a.Token)
	}
	// Later: into the delayed set, not ready.
	if err := c.Retry(ctx, ds[1], time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.c.ZCard(ctx, e.key("q", "delayed")).Result(); n != 1 || e.llen("q", "ready") != 0 {
		t.Fatalf("delayed %d ready %d after a retry in an hour, want 1 and 0", n, e.llen("q", "ready"))
	}
	if err := c.Retry(ctx, ds[1], time.Time{}); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("second retry of one delivery: %v, want ErrLeaseLost", err)
	}
}

func TestReleaseKeepsOrderAndCounters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"), msg("q", "c"), msg("q", "d"))
	c := e.open("q", time.Minute)
	ds := fetchN(t, c, 3)
	if err := c.Release(ctx, ds...); err != nil {
		t.Fatalf("release: %v", err)
	}
	again := fetchN(t, c, 4)
	if got := ids(again); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("after release: %v, want [a b c d]", got)
	}
	for i, d := range again[:3] {
		if d.Retries != 0 || d.Recoveries != 0 || e.deliveries("q", d) != 2 || d.Token == ds[i].Token {
			t.Fatalf("%s after release: attempt %d recoveries %d token %s", d.ID, d.Retries, d.Recoveries, d.Token)
		}
	}
	if err := c.Release(ctx, ds[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("release of an old delivery: %v, want ErrLeaseLost", err)
	}
}

func TestDiscardKeepsARecordAndCapsTheList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &list.Config{DiscardMax: 2})
	ctx := context.Background()
	e.enqueue(msg("q", "a"), msg("q", "b"), msg("q", "c"))
	c := e.open("q", time.Minute)
	ds := fetchN(t, c, 3)
	before := time.Now().Add(-time.Second)
	for i, d := range ds {
		if err := c.Discard(ctx, d, "reason "+strconv.Itoa(i)); err != nil {
			t.Fatalf("discard: %v", err)
		}
	}
	recs, err := e.c.LRange(ctx, e.key("q", "dead"), 0, -1).Result()
	if err != nil || len(recs) != 2 {
		t.Fatalf("dead list: %d records (%v), want 2", len(recs), err)
	}
	dropped, _ := e.c.Get(ctx, e.key("q", "dead_dropped")).Int()
	if dropped != 1 {
		t.Fatalf("dead_dropped %d, want 1", dropped)
	}
	rec, err := codec.DecodeDiscarded([]byte(recs[0]))
	if err != nil {
		t.Fatal(err)
	}
	var m broker.Message
	if _, err := codec.Decode(rec.Message, &m); err != nil {
		t.Fatal(err)
	}
	if rec.Reason != "reason 2" || m.ID != "c" || string(m.Payload) != "payload of c" || rec.At.Before(before) {
		t.Fatalf("newest record: reason %q id %q payload %q at %v", rec.Reason, m.ID, m.Payload, rec.At)
	}
	if n, _ := e.c.ZCard(ctx, e.key("q", "lease")).Result(); n != 0 {
		t.Fatalf("in flight after discard: %d", n)
	}
}

func TestSettleOnTheWrongConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.enqueue(msg("q", "a"))
	c := e.open("q", time.Minute)
	other := e.open("other", time.Minute)
	d := fetch(t, c, 1)[0]
	if err := other.Ack(context.Background(), d); err == nil {
		t.Fatal("ack on a consumer of another queue: no error")
	}
	if err := c.Ack(context.Background(), d); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if err := e.d.Check(context.Background()); err != nil {
		t.Fatalf("check: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	for _, cfg := range []*list.Config{
		{MaxLen: -1}, {DiscardMax: -1}, {ReapBatch: -1}, {Prefix: "a{b}"}, {Prefix: "a b"},
	} {
		if _, err := list.New(c, cfg); err == nil {
			t.Errorf("New(%+v): no error", *cfg)
		}
	}
	if _, err := list.New(c, nil); err != nil {
		t.Fatalf("New(nil): %v", err)
	}
}

func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rc.Close() })
	d, err := list.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Check(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "list: redis unreachable: ") {
		t.Fatalf("check: %v, want list: redis unreachable: ...", err)
	}
}

// TestEachDeliveryHasItsToken: each fetch of a message has a token of its
// own, and the stored message counts the deliveries.
func TestEachDeliveryHasItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	c := e.open("q", time.Minute)
	seen := map[string]bool{}
	for want := 1; want <= 12; want++ {
		d := fetch(t, c, 1)[0]
		if n := e.deliveries("q", d); n != want || seen[d.Token] {
			t.Fatalf("delivery %d: token %s (seen before: %v), deliveries %d", want, d.Token, seen[d.Token], n)
		}
		seen[d.Token] = true
		if err := c.Release(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
}
