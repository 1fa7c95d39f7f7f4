package brokertest

import (
	"bytes"
	"maps"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// testRoundTrip proves every field of a Message survives Enqueue and Fetch,
// including binary and empty payloads, and that a Delivery carries its lease.
func testRoundTrip(t *testing.T, e *env) {
	const q = "roundtrip"
	c := Open(t, e.d, q, nil)

	binary := make([]byte, 0, 300)
	for i := range 256 {
		binary = append(binary, byte(i))
	}
	binary = append(binary, "\r\n,:1,2,3,4:x{}\x00"...)
	// An hour ago, to the millisecond: a driver that stamps its own time
	// instead of keeping the producer's is caught.
	enq := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli() + 123)
	want := map[string]*broker.Message{}
	for _, m := range []*broker.Message{
		{
			ID: "rt-full:1", Kind: "email.send", Queue: q, Payload: binary,
			Headers: map[string]string{
				"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"empty":       "",
				"ünï code":    "välue\x00with nul, comma: colon",
			},
			MaxAttempts: 7, Timeout: 1234 * time.Millisecond, EnqueuedAt: enq,
		},
		{ID: "rt-empty", Kind: "k", Queue: q, Payload: []byte{}, EnqueuedAt: enq.Add(time.Millisecond)},
		{ID: "rt-nil", Kind: "k", Queue: q, EnqueuedAt: enq.Add(2 * time.Millisecond)},
	} {
		want[m.ID] = m
	}
	msgs := make([]*broker.Message, 0, len(want))
	for _, m := range want {
		msgs = append(msgs, m)
	}
	before := time.Now()
	Enqueue(t, e.d, msgs...)
	ds := FetchN(t, c, len(want), 10, 10*time.Second)

	seen := map[string]bool{}
	for _, d := range ds {
		m, ok := want[d.ID]
		if !ok || seen[d.ID] {
			t.Fatalf("unexpected or repeated delivery %q (have %v)", d.ID, IDs(ds))
		}
		seen[d.ID] = true
		checkSameMessage(t, &d.Message, m)
		if d.Queue != q {
			t.Errorf("%s: Queue = %q, want %q", d.ID, d.Queue, q)
		}
		if d.Retries != 0 || d.Recoveries != 0 {
			t.Errorf("%s: first delivery has Retries %d, Recoveries %d; want 0, 0", d.ID, d.Retries, d.Recoveries)
		}
		if e.caps.AtLeastOnce {
			if d.Token == "" {
				t.Errorf("%s: empty Token from an at-least-once driver", d.ID)
			}
			// Default visibility timeout, plus a second for clock rounding.
			latest := time.Now().Add(broker.DefaultVisibilityTimeout + time.Second)
			if !d.LeaseDeadline.After(before) || d.LeaseDeadline.After(latest) {
				t.Errorf("%s: LeaseDeadline %v, want after %v and by %v", d.ID, d.LeaseDeadline, before, latest)
			}
		} else if !d.LeaseDeadline.IsZero() {
			t.Errorf("%s: LeaseDeadline %v from a driver without leases, want zero", d.ID, d.LeaseDeadline)
		}
	}
	if err := c.Ack(Context(t, 10*time.Second), ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
}

// checkSameMessage compares what a driver must carry from Enqueue to Fetch.
func checkSameMessage(t testing.TB, got, want *broker.Message) {
	t.Helper()
	if got.ID != want.ID || got.Kind != want.Kind {
		t.Errorf("ID/Kind = %q/%q, want %q/%q", got.ID, got.Kind, want.ID, want.Kind)
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		t.Errorf("%s: Payload = %q, want %q", want.ID, got.Payload, want.Payload)
	}
	if !maps.Equal(got.Headers, want.Headers) {
		t.Errorf("%s: Headers = %q, want %q", want.ID, got.Headers, want.Headers)
	}
	if got.MaxAttempts != want.MaxAttempts || got.Timeout != want.Timeout {
		t.Errorf("%s: MaxAttempts/Timeout = %d/%v, want %d/%v", want.ID, got.MaxAttempts, got.Timeout, want.MaxAttempts, want.Timeout)
	}
	if got.EnqueuedAt.UnixMilli() != want.EnqueuedAt.UnixMilli() {
		t.Errorf("%s: EnqueuedAt = %v, want %v to the millisecond", want.ID, got.EnqueuedAt, want.EnqueuedAt)
	}
}

// testBatch proves one Enqueue call stores messages for several queues, that
// Fetch honours max and returns several deliveries when several are ready,
// and that each message comes out exactly once.
func testBatch(t *testing.T, e *env) {
	const total, batchMax = 500, 100
	queues := []string{"batch-a", "batch-b", "batch-c"}
	cs := make([]broker.Consumer, len(queues))
	for i, q := range queues {
		cs[i] = Open(t, e.d, q, nil)
	}
	msgs := make([]*broker.Message, total)
	want := make([]int, len(queues))
	queueOf := map[string]string{}
	for i := range msgs {
		msgs[i] = NewMessage(queues[i%len(queues)], i)
		want[i%len(queues)]++
		queueOf[msgs[i].ID] = msgs[i].Queue
	}
	Enqueue(t, e.d, msgs...)

	seen := map[string]bool{}
	biggest := 0
	ctx := Context(t, 30*time.Second)
	for qi, c := range cs {
		got := 0
		for got < want[qi] {
			ds := Fetch(t, c, batchMax, 10*time.Second)
			biggest = max(biggest, len(ds))
			for _, d := range ds {
				if seen[d.ID] {
					t.Fatalf("%s delivered twice", d.ID)
				}
				seen[d.ID] = true
				if d.Queue != queues[qi] || queueOf[d.ID] != queues[qi] {
					t.Fatalf("%s (queue %q) fetched from queue %q", d.ID, d.Queue, queues[qi])
				}
			}
			got += len(ds)
			if err := c.Ack(ctx, ds...); err != nil {
				t.Fatalf("Ack of %d: %v", len(ds), err)
			}
		}
		if got != want[qi] {
			t.Fatalf("queue %s: fetched %d, want %d", queues[qi], got, want[qi])
		}
	}
	if biggest < 2 {
		t.Errorf("every Fetch(max=%d) returned 1 delivery though up to %d were ready", batchMax, want[0])
	}
	for _, c := range cs {
		ExpectNone(t, c, 200*time.Millisecond)
	}
}

// testFIFO proves one consumer gets messages in enqueue order, across a
// batch and single enqueues and across fetch boundaries.
func testFIFO(t *testing.T, e *env) {
	const q, total = "fifo", 200
	c := Open(t, e.d, q, nil)
	msgs := make([]*broker.Message, total)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
	}
	Enqueue(t, e.d, msgs[:150]...)
	for _, m := range msgs[150:] {
		Enqueue(t, e.d, m)
	}
	ctx := Context(t, 30*time.Second)
	next := 0
	for next < total {
		ds := Fetch(t, c, 7, 10*time.Second)
		for _, d := range ds {
			if d.ID != msgs[next].ID {
				t.Fatalf("delivery %d is %s, want %s", next, d.ID, msgs[next].ID)
			}
			next++
		}
		if err := c.Ack(ctx, ds...); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
}
