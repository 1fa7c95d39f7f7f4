package brokertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// HostileQueueNames are queue names every driver must refuse: empty, braces
// (they would change the Redis Cluster hash tag), control characters, white
// space, too long, invalid UTF-8.
var HostileQueueNames = []string{
	"",
	"a{b",
	"a}b",
	"{q}",
	"a\nb",
	"a\x00b",
	"a b",
	strings.Repeat("x", broker.MaxNameLen+1),
	"bad\xff\xfeutf8",
}

// testHostileQueueNames proves Enqueue and Open refuse every hostile queue
// name with a *broker.QueueNameError, store nothing, and that a batch holding
// one hostile name stores none of its messages.
func testHostileQueueNames(t *testing.T, e *env) {
	ctx := Context(t, 30*time.Second)
	for _, name := range HostileQueueNames {
		m := &broker.Message{ID: "hostile", Kind: "k", Queue: name}
		checkQueueErr(t, "Enqueue", name, e.d.Enqueue(ctx, []*broker.Message{m}))
		c, err := e.d.Open(ctx, name, nil)
		checkQueueErr(t, "Open", name, err)
		if c != nil {
			t.Errorf("Open(%q) returned a consumer with its error", name)
			_ = c.Close(ctx)
		}
	}
	AssertNoKeys(t, e.prefix)

	const ok = "hostile-ok"
	c := Open(t, e.d, ok, nil)
	for _, name := range HostileQueueNames {
		good := NewMessage(ok, 1)
		bad := &broker.Message{ID: "bad", Kind: "k", Queue: name}
		checkQueueErr(t, "Enqueue(good, bad)", name, e.d.Enqueue(ctx, []*broker.Message{good, bad}))
	}
	ExpectNone(t, c, 300*time.Millisecond)
}

func checkQueueErr(t *testing.T, op, name string, err error) {
	t.Helper()
	var qe *broker.QueueNameError
	switch {
	case !errors.Is(err, broker.ErrInvalidQueue):
		t.Errorf("%s with queue %q: got %v, want broker.ErrInvalidQueue", op, name, err)
	case !errors.As(err, &qe):
		t.Errorf("%s with queue %q: %v is not a *broker.QueueNameError", op, name, err)
	case qe.Name != name:
		t.Errorf("%s with queue %q: QueueNameError names %q", op, name, qe.Name)
	}
}

// testInvalidMessages proves Enqueue refuses messages ValidateMessage
// refuses with a *broker.MessageError, stores nothing, and that a batch with
// one bad message stores none of them. An empty batch is a no-op.
func testInvalidMessages(t *testing.T, e *env) {
	const q = "invalid"
	ctx := Context(t, 30*time.Second)
	if err := e.d.Enqueue(ctx, nil); err != nil {
		t.Errorf("Enqueue of no messages: %v, want nil", err)
	}
	cases := []struct {
		name   string
		mutate func(m *broker.Message)
	}{
		{"empty ID", func(m *broker.Message) { m.ID = "" }},
		{"empty Kind", func(m *broker.Message) { m.Kind = "" }},
		{"long ID", func(m *broker.Message) { m.ID = strings.Repeat("i", broker.MaxNameLen+1) }},
		{"Kind with a tab", func(m *broker.Message) { m.Kind = "a\tb" }},
		{"ID with a brace", func(m *broker.Message) { m.ID = "a{b" }},
		{"negative MaxAttempts", func(m *broker.Message) { m.MaxAttempts = -1 }},
	}
	badMessage := func(i int) *broker.Message {
		m := NewMessage(q, 99)
		cases[i].mutate(m)
		return m
	}
	for i, tc := range cases {
		checkMessageErr(t, "Enqueue("+tc.name+")", e.d.Enqueue(ctx, []*broker.Message{badMessage(i)}))
	}
	AssertNoKeys(t, e.prefix)

	c := Open(t, e.d, q, nil)
	for i, tc := range cases {
		batch := []*broker.Message{NewMessage(q, 1), badMessage(i)}
		checkMessageErr(t, "Enqueue(good, "+tc.name+")", e.d.Enqueue(ctx, batch))
	}
	ExpectNone(t, c, 300*time.Millisecond)
}

func checkMessageErr(t *testing.T, op string, err error) {
	t.Helper()
	var me *broker.MessageError
	if !errors.Is(err, broker.ErrInvalidMessage) {
		t.Errorf("%s: got %v, want broker.ErrInvalidMessage", op, err)
	} else if !errors.As(err, &me) {
		t.Errorf("%s: %v is not a *broker.MessageError", op, err)
	}
}

// testCheck proves Check passes against the test server.
func testCheck(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.d.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
}
