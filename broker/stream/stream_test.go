package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	in := &broker.Message{
		ID: "order:1", Kind: "email", Queue: "mail", Payload: []byte{0, 1, 2, 0xff},
		Headers:     map[string]string{"traceparent": "00-abc", "k": ""},
		MaxAttempts: 5, Timeout: 1500 * time.Millisecond,
		EnqueuedAt: time.UnixMilli(1_700_000_000_123),
	}
	e.enqueue(in)
	c := e.open("mail", 20*time.Second)

	before := time.Now()
	ds := e.fetch(c, 10)
	after := time.Now()
	if len(ds) != 1 {
		t.Fatalf("got %d deliveries, want 1", len(ds))
	}
	d := ds[0]
	got := d.Message
	want := *in
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("message\n got %+v\nwant %+v", got, want)
	}
	if d.Receipt == "" || d.Token != d.Receipt+"/1" {
		t.Fatalf("token %q receipt %q, want token <receipt>/1", d.Token, d.Receipt)
	}
	if d.LeaseDeadline.Before(before.Add(20*time.Second)) || d.LeaseDeadline.After(after.Add(20*time.Second)) {
		t.Fatalf("lease deadline %v not within fetch time + 20s", d.LeaseDeadline)
	}
	if owner, count, _, ok := e.pending("mail", d.Receipt); !ok || owner != stream.ConsumerName(c) || count != 1 {
		t.Fatalf("pending entry: owner %q count %d ok %v", owner, count, ok)
	}

	if err := c.Ack(context.Background(), d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if k := e.keys(); len(k) != 0 {
		t.Fatalf("keys left after ack: %v", k)
	}
	err := c.Ack(context.Background(), d)
	if !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("second Ack: %v, want ErrLeaseLost", err)
	}
	var de *broker.DeliveryError
	if !errors.As(err, &de) || de.Delivery != d {
		t.Fatalf("second Ack error %v does not carry the delivery", err)
	}
}

func TestFIFO(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var want []string
	var msgs []*broker.Message
	for i := range 30 {
		id := fmt.Sprintf("m%02d", i)
		want = append(want, id)
		msgs = append(msgs, msg("q", id))
	}
	e.enqueue(msgs[:10]...)
	e.enqueue(msgs[10:]...)
	c := e.open("q", 0)
	var got []*broker.Delivery
	for len(got) < 30 {
		got = append(got, e.fetch(c, 7)...)
	}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("order %v, want %v", ids(got), want)
	}
	if err := c.Ack(context.Background(), got...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if k := e.keys(); len(k) != 0 {
		t.Fatalf("keys left: %v", k)
	}
}

func TestEnqueueManyQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var msgs []*broker.Message
	want := map[string][]string{}
	for i := range 700 {
		q := []string{"q1", "q2", "q3"}[i%3]
		if i >= 30 {
			q = "q1" // q1 gets more than one script call's worth
		}
		id := fmt.Sprintf("m%03d", i)
		msgs = append(msgs, msg(q, id))
		want[q] = append(want[q], id)
	}
	e.enqueue(msgs...)
	for q, w := range want {
		c := e.open(q, 0)
		var got []*broker.Delivery
		for len(got) < len(w) {
			got = append(got, e.fetch(c, 1000)...)
		}
		if !slices.Equal(ids(got), w) {
			t.Fatalf("queue %s: %d messages, want %d in order", q, len(got), len(w))
		}
		if err := c.Ack(context.Background(), got...); err != nil {
			t.Fatal(err)
		}
	}
	if k := e.keys(); len(k) != 0 {
		t.Fatalf("keys left: %v", k)
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{MaxLen: 2})
	ctx := context.Background()
	err := e.d.Enqueue(ctx, []*broker.Message{msg("q", "1"), msg("q", "2"), msg("q", "3")})
	if !errors.Is(err, broker.ErrQueueFull) {
		t.Fatalf("Enqueue of 3 into MaxLen 2: %v, want ErrQueueFull", err)
	}
	if k := e.keys(); len(k) != 0 {
		t.Fatalf("a refused batch stored something: %v", k)
	}
	later := msg("q", "2")
	later.RunAt = time.Now().Add(time.Hour)
	e.enqueue(msg("q", "1"), later) // delayed messages count too
	err = e.d.Enqueue(ctx, []*broker.Message{msg("q", "3"), msg("other", "x")})
	if !errors.Is(err, broker.ErrQueueFull) {
		t.Fatalf("Enqueue into a full queue: %v, want ErrQueueFull", err)
	}
	if n, _ := e.rdb.XLen(ctx, e.key("other", "stream")).Result(); n != 1 {
		t.Fatalf("other queue holds %d, want 1: a full queue must not block the others", n)
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.d.Open(ctx, "a{b}", nil); !errors.Is(err, broker.ErrInvalidQueue) {
		t.Errorf("Open with a brace: %v", err)
	}
	if err := e.d.Enqueue(ctx, []*broker.Message{msg("q", "ok"), {ID: "", Kind: "k", Queue: "q"}}); !errors.Is(err, broker.ErrInvalidMessage) {
		t.Errorf("Enqueue without ID: %v", err)
	}
	if err := e.d.Enqueue(ctx, []*broker.Message{nil}); err == nil {
		t.Error("Enqueue(nil message) accepted")
	}
	if k := e.keys(); len(k) != 0 {
		t.Errorf("invalid batches stored %v", k)
	}
	c := e.open("q", 0)
	if _, err := c.Fetch(ctx, 0); err == nil {
		t.Error("Fetch(0) accepted")
	}
	bad := &broker.Delivery{Message: *msg("q", "x"), Receipt: "not-an-id", Token: "1"}
	other := &broker.Delivery{Message: *msg("p", "y"), Receipt: "1-1", Token: "1"}
	err := c.Ack(ctx, bad, other)
	var merr *multierror.Error
	if !errors.As(err, &merr) || len(merr.Errors) != 2 {
		t.Fatalf("Ack of foreign deliveries: %v, want 2 delivery errors", err)
	}
	for _, de := range merr.Errors {
		if _, ok := de.(*broker.DeliveryError); !ok {
			t.Errorf("%T in batch error, want *broker.DeliveryError", de)
		}
	}
	if err := c.Ack(ctx, nil); err == nil {
		t.Error("Ack(nil) accepted")
	}

	for _, cfg := range []stream.Config{
		{Prefix: "a b"}, {Group: "g{x}"}, {MaxLen: -1}, {DiscardMax: -1}, {PollInterval: time.Microsecond}, {Consumer: "x\n"},
	} {
		if _, err := stream.New(e.rdb, &cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := stream.New(nil, nil); err == nil {
		t.Error("New(nil client) accepted")
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if err := e.d.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer down.Close()
	d, err := stream.New(down, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Check on a closed port: %v", err)
	}
}

// Someone destroys the consumer group while the stream lives: Fetch
// recreates it and delivers the entries.
func TestGroupRecreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.enqueue(msg("q", "a"))
	if err := e.rdb.XGroupDestroy(context.Background(), e.key("q", "stream"), "conveyor").Err(); err != nil {
		t.Fatal(err)
	}
	c := e.open("q", 0)
	if d := e.fetch(c, 1); d[0].ID != "a" {
		t.Fatalf("got %v", ids(d))
	}
	if e.logs.find(slog.LevelWarn, "group was missing") == "" {
		t.Fatal("no warning about the recreated group")
	}
}

func TestCompareIDs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"1-0", "2-0", -1},
		{"9-0", "10-0", -1},
		{"5-9", "5-10", -1},
		{"10-1", "9-99", 1},
		{"1700000000000-3", "1700000000000-3", 0},
		{"007-1", "7-1", 0},
		{"0-0", "0-1", -1},
		{"18446744073709551615-0", "18446744073709551614-9", 1},
	} {
		if got := stream.CompareIDs(c.a, c.b); got != c.want {
			t.Errorf("CompareIDs(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := stream.CompareIDs(c.b, c.a); got != -c.want {
			t.Errorf("CompareIDs(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

// The group destroyed under a consumer that already fetched: its next Fetch
// (a plain read of new entries, outside fetch.lua) recreates the group.
func TestGroupRecreatedWhileConsuming(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: time.Minute})
	e.enqueue(msg("q", "a"), msg("q", "b"))
	c := e.open("q", 0)
	if d := e.fetch(c, 1); d[0].ID != "a" {
		t.Fatalf("got %v", ids(d))
	}
	if err := e.rdb.XGroupDestroy(context.Background(), e.key("q", "stream"), "conveyor").Err(); err != nil {
		t.Fatal(err)
	}
	// From ID 0: a, whose pending entry went with the group, comes again.
	if d := e.fetch(c, 2); !slices.Equal(ids(d), []string{"a", "b"}) {
		t.Fatalf("got %v, want [a b]", ids(d))
	}
	if e.logs.find(slog.LevelWarn, "group was missing") == "" {
		t.Fatal("no warning about the recreated group")
	}
}
