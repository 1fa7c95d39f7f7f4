package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
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
			attempts[d.ID] = d.Attempt
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
	if k := e.keys(); !slices.Equal(k, []string{e.key("q", "dead")}) {
		t.Fatalf("keys %v, want only the discard list", k)
	}
}
