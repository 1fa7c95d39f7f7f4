package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/codec"
)

func TestRetryThenNoKeysLeft(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: time.Minute})
	later := msg("q", "c")
	later.RunAt = time.Now().Add(100 * time.Millisecond)
	e.enqueue(msg("q", "a"), msg("q", "b"), later)
	c := e.open("q", 0)
	ctx := context.Background()
	brokertest.Promote(t, e.d, "q")

	ds := e.fetch(c, 10)
	if !slices.Equal(ids(ds), []string{"a", "b"}) {
		t.Fatalf("fetched %v", ids(ds))
	}
	if err := c.Retry(ctx, ds[0], time.Now().Add(-time.Second)); err != nil { // now
		t.Fatal(err)
	}
	if err := c.Retry(ctx, ds[1], time.Now().Add(150*time.Millisecond)); err != nil { // later
		t.Fatal(err)
	}
	attempts := map[string]int{}
	for len(attempts) < 3 {
		for _, d := range e.fetch(c, 10) {
			if _, dup := attempts[d.ID]; dup {
				t.Fatalf("%s delivered twice", d.ID)
			}
			attempts[d.ID] = d.Retries
			if d.Recoveries != 0 || d.Payload == nil {
				t.Fatalf("%s: recoveries %d payload %q", d.ID, d.Recoveries, d.Payload)
			}
			if err := c.Ack(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := map[string]int{"a": 1, "b": 1, "c": 0}; !reflect.DeepEqual(attempts, want) {
		t.Fatalf("attempts %v, want %v", attempts, want)
	}
	if k := e.keys(); len(k) != 0 {
		t.Fatalf("keys left after all acked: %v", k)
	}
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{DiscardMax: 2})
	e.enqueue(msg("q", "m1"), msg("q", "m2"), msg("q", "m3"))
	c := e.open("q", 0)
	ds := e.fetch(c, 3)
	before := time.Now().Add(-time.Second)
	for i, d := range ds {
		if err := c.Discard(context.Background(), d, fmt.Sprintf("reason %d: é", i+1)); err != nil {
			t.Fatalf("Discard: %v", err)
		}
	}
	recs, err := e.rdb.LRange(context.Background(), e.key("q", "dead"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("discard list holds %d records, want 2 (DiscardMax)", len(recs))
	}
	rec, err := codec.DecodeDiscarded([]byte(recs[0]))
	if err != nil {
		t.Fatalf("DecodeDiscarded: %v", err)
	}
	if rec.Reason != "reason 3: é" || rec.At.Before(before) || rec.At.After(time.Now().Add(time.Second)) {
		t.Fatalf("record reason %q at %v", rec.Reason, rec.At)
	}
	var m broker.Message
	if _, err := codec.Decode(rec.Message, &m); err != nil || m.ID != "m3" || !bytes.Equal(m.Payload, []byte("payload of m3")) {
		t.Fatalf("discarded message %+v: %v", m, err)
	}
	if dropped, err := e.rdb.Get(context.Background(), e.key("q", "dead_dropped")).Int(); err != nil || dropped != 1 {
		t.Fatalf("dead_dropped = %d, %v; want 1 record counted as trimmed", dropped, err)
	}
	k := e.keys()
	slices.Sort(k)
	if !slices.Equal(k, []string{e.key("q", "dead"), e.key("q", "dead_dropped")}) {
		t.Fatalf("keys %v, want only the discard list and its drop count", k)
	}
}

// An ack batch is fenced per delivery: deliveries this consumer holds are
// acked, while others in the same batch (owned by another consumer, a stale
// delivery count, already acked) fail with ErrLeaseLost and stay as they
// are. The batch spans far more of the consumer's pending entries than
// ack.lua's ranged lookup returns, so some are found by the lookup per ID,
// and another consumer's entry lies inside the range.
func TestAckBatchFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: time.Minute})
	var msgs []*broker.Message
	for i := range 40 {
		msgs = append(msgs, msg("q", fmt.Sprintf("m%02d", i)))
	}
	e.enqueue(msgs...)
	c1, c2 := e.open("q", time.Minute), e.open("q", time.Minute)
	ds := e.fetch(c1, 3)                 // m00-m02
	ds = append(ds, e.fetch(c2, 3)...)   // m03-m05
	ds = append(ds, e.fetch(c1, 100)...) // m06-m39
	if len(ds) != 40 || ds[39].ID != "m39" || ds[3].ID != "m03" {
		t.Fatalf("fetched %v", ids(ds))
	}
	ctx := context.Background()
	if err := c1.Ack(ctx, ds[2]); err != nil {
		t.Fatal(err)
	}
	stale := *ds[1]
	stale.Token = stale.Receipt + "/2"
	// c2's delivery settled through c1: same queue, a token c2 was handed.
	batch := []*broker.Delivery{ds[39], ds[0], ds[4], &stale, ds[20], ds[2], ds[7]}
	err := c1.Ack(ctx, batch...)
	var merr *multierror.Error
	if !errors.As(err, &merr) {
		t.Fatalf("Ack: %v, want a *multierror.Error", err)
	}
	var lost []string
	for _, e := range merr.Errors {
		var de *broker.DeliveryError
		if !errors.As(e, &de) || !errors.Is(e, broker.ErrLeaseLost) {
			t.Fatalf("batch error %v, want a DeliveryError wrapping ErrLeaseLost", e)
		}
		lost = append(lost, de.Delivery.Token)
	}
	if want := []string{ds[4].Token, stale.Token, ds[2].Token}; !slices.Equal(lost, want) {
		t.Fatalf("lost %v, want %v", lost, want)
	}
	for _, i := range []int{39, 0, 20, 7, 2} {
		if _, _, _, ok := e.pending("q", ds[i].Receipt); ok {
			t.Errorf("%s still pending after ack", ds[i].ID)
		}
		if n, _ := e.rdb.XRange(ctx, e.key("q", "stream"), ds[i].Receipt, ds[i].Receipt).Result(); len(n) != 0 {
			t.Errorf("%s still in the stream after ack", ds[i].ID)
		}
	}
	for i, owner := range map[int]broker.Consumer{1: c1, 4: c2} {
		if o, n, _, ok := e.pending("q", ds[i].Receipt); !ok || o != stream.ConsumerName(owner) || n != 1 {
			t.Errorf("%s: pending %v owner %q count %d, want untouched", ds[i].ID, ok, o, n)
		}
	}
	if n, _ := e.rdb.XLen(ctx, e.key("q", "stream")).Result(); n != 35 {
		t.Fatalf("stream length %d, want 35", n)
	}
}
