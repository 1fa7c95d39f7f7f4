package list_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// logBuffer is a log sink a test can read while the driver writes to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// deadRecords reads queue's discard list, newest first, decoded.
func deadRecords(t *testing.T, c redis.UniversalClient, key string) []codec.Discarded {
	t.Helper()
	raw, err := c.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]codec.Discarded, len(raw))
	for i, r := range raw {
		if out[i], err = codec.DecodeDiscarded([]byte(r)); err != nil {
			t.Fatalf("discard record %q: %v", r, err)
		}
	}
	return out
}

// decodeStored decodes a discarded stored message.
func decodeStored(t *testing.T, b []byte) (broker.Message, int) {
	t.Helper()
	var m broker.Message
	n, err := codec.Decode(b, &m)
	if err != nil {
		t.Fatalf("discarded message does not decode: %v", err)
	}
	return m, n
}

// TestPoisonAfterThreeLeaseExpiries: with the default cap, a message whose
// lease runs out three times (three consumers took it and never settled,
// as crashed workers would) is discarded as poison by the fetch that
// reclaims it the third time, and never delivered again.
func TestPoisonAfterThreeLeaseExpiries(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	e := newEnv(t, &list.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	const vt = 200 * time.Millisecond
	e.enqueue(msg("q", "a"))

	var last *broker.Delivery
	for i := range 3 {
		// Each Fetch after the first waits in Redis for the previous
		// lease to run out, then reclaims the message itself.
		c := e.open("q", vt)
		ds := fetch(t, c, 10)
		if len(ds) != 1 || ds[0].ID != "a" || ds[0].Recoveries != i || ds[0].Retries != 0 {
			t.Fatalf("delivery %d: %v, want a with Recoveries %d", i+1, ds, i)
		}
		last = ds[0]
	}
	if n := e.deliveries("q", last); n != 3 {
		t.Fatalf("third delivery counts %d deliveries, want 3", n)
	}

	// b becomes due just after a's third lease runs out. fetch.lua reclaims
	// before it pops, and a reclaimed message goes to the front of ready: a
	// Fetch that returns b alone has reclaimed a, and did not requeue it.
	b := msg("q", "b")
	b.RunAt = last.LeaseDeadline.Add(time.Millisecond)
	e.enqueue(b)
	brokertest.Promote(t, e.d, "q")
	c := e.open("q", time.Minute)
	ds := fetch(t, c, 10)
	if got := ids(ds); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("fetched %v after the third expiry, want [b]: a is poison", got)
	}

	recs := deadRecords(t, e.c, e.key("q", "dead"))
	if len(recs) != 1 {
		t.Fatalf("dead holds %d records, want 1", len(recs))
	}
	if want := "conveyor: poison: lease expired 3 times"; recs[0].Reason != want {
		t.Fatalf("reason %q, want %q", recs[0].Reason, want)
	}
	if !strings.HasPrefix(recs[0].Reason, broker.PoisonReason) {
		t.Fatalf("reason %q does not start with broker.PoisonReason", recs[0].Reason)
	}
	if recs[0].At.Before(last.LeaseDeadline) {
		t.Fatalf("discarded at %v, before the lease ran out at %v", recs[0].At, last.LeaseDeadline)
	}
	m, deliveries := decodeStored(t, recs[0].Message)
	if m.ID != "a" || m.Recoveries != 3 || m.Retries != 0 || string(m.Payload) != "payload of a" || deliveries != 3 {
		t.Fatalf("discarded %s: recoveries %d, attempt %d, payload %q, deliveries %d; want a, 3, 0, its payload, 3",
			m.ID, m.Recoveries, m.Retries, m.Payload, deliveries)
	}

	// The crashed worker's delivery stays fenced off.
	if err := c.Ack(ctx, last); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("ack of the poisoned delivery: %v, want ErrLeaseLost", err)
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
	if n, err := e.d.Reap(ctx, "q"); err != nil || n != 0 {
		t.Fatalf("reap after the discard: %d, %v; want 0", n, err)
	}
	expectEmpty(t, c, 2*vt)
	if ks := redistest.Keys(t, e.c, e.prefix); !slices.Equal(ks, []string{e.key("q", "dead")}) {
		t.Fatalf("keys left: %v, want only the discard list", ks)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, `msg="list: poison messages discarded" count=1 queue=q`) {
		t.Fatalf("log does not warn of the poison discard:\n%s", out)
	}
}

// TestPoisonCapOff: MaxRecoveries -1 hands a message back however many
// times its lease runs out.
func TestPoisonCapOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &list.Config{MaxRecoveries: -1})
	e.enqueue(msg("q", "a"))
	c := e.open("q", time.Minute)
	for i := range 6 {
		ds := fetch(t, c, 10)
		if len(ds) != 1 || ds[0].ID != "a" || ds[0].Recoveries != i {
			t.Fatalf("delivery %d: %v, want a with Recoveries %d", i+1, ids(ds), i)
		}
		// The next Fetch reclaims it.
		e.expireLeases("q")
	}
	if n := e.llen("q", "dead"); n != 0 {
		t.Fatalf("dead holds %d records with the cap off, want 0", n)
	}
}

// TestPoisonCapOneDiscardsOnFirstExpiry: with MaxRecoveries 1 the first
// expiry discards. Reap counts none of them as requeued, keeps stepping
// past steps that only discarded, and trims the discard list as Discard
// does.
func TestPoisonCapOneDiscardsOnFirstExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &list.Config{MaxRecoveries: 1, ReapBatch: 2, DiscardMax: 3})
	ctx := context.Background()
	var msgs []*broker.Message
	for _, id := range seq("j", 5) {
		msgs = append(msgs, msg("q", id))
	}
	e.enqueue(msgs...)
	c := e.open("q", time.Minute)
	fetchN(t, c, 5)
	e.expireLeases("q")

	n, err := e.d.Reap(ctx, "q")
	if err != nil || n != 0 {
		t.Fatalf("reap: %d, %v; want 0 requeued", n, err)
	}
	if n, err := e.c.ZCard(ctx, e.key("q", "lease")).Result(); err != nil || n != 0 {
		t.Fatalf("leases after reap: %d (%v), want 0", n, err)
	}
	if n := e.llen("q", "ready"); n != 0 {
		t.Fatalf("ready holds %d after reap, want 0", n)
	}
	recs := deadRecords(t, e.c, e.key("q", "dead"))
	var got []string
	for _, r := range recs {
		if r.Reason != "conveyor: poison: lease expired 1 times" {
			t.Fatalf("reason %q", r.Reason)
		}
		m, _ := decodeStored(t, r.Message)
		if m.Recoveries != 1 {
			t.Fatalf("%s discarded with Recoveries %d, want 1", m.ID, m.Recoveries)
		}
		got = append(got, m.ID)
	}
	// Equal deadlines: reclaimed in member order, j000 first; newest first.
	if want := []string{"j004", "j003", "j002"}; !slices.Equal(got, want) {
		t.Fatalf("dead holds %v, want %v (DiscardMax 3)", got, want)
	}
	if n, err := e.c.Get(ctx, e.key("q", "dead_dropped")).Int(); err != nil || n != 2 {
		t.Fatalf("dead_dropped %d (%v), want 2", n, err)
	}
	expectEmpty(t, c, 100*time.Millisecond)
}

// TestPoisonOnMiniredis runs the poison path of fetch.lua and reap.lua on
// gopher-lua, whose number formatting differs from Redis's Lua.
func TestPoisonOnMiniredis(t *testing.T) {
	t.Parallel()
	mr, rc, d := onMiniredis(t, nil)
	now := time.Now()
	mr.SetTime(now)
	ctx := context.Background()
	c := leaseOne(t, d)
	for i := range 3 {
		if i > 0 {
			now = now.Add(2 * time.Minute) // the lease runs out
			mr.SetTime(now)
		}
		ds := fetch(t, c, 10)
		if len(ds) != 1 || ds[0].Recoveries != i {
			t.Fatalf("delivery %d: %v, want a with Recoveries %d", i+1, ids(ds), i)
		}
	}
	mr.SetTime(now.Add(2 * time.Minute))
	if n, err := d.Reap(ctx, "q"); err != nil || n != 0 {
		t.Fatalf("reap: %d, %v; want 0 requeued", n, err)
	}
	recs := deadRecords(t, rc, "conveyor:{q}:dead")
	if len(recs) != 1 || recs[0].Reason != "conveyor: poison: lease expired 3 times" {
		t.Fatalf("dead records %+v, want one poison record", recs)
	}
	if m, n := decodeStored(t, recs[0].Message); m.ID != "a" || m.Recoveries != 3 || n != 3 {
		t.Fatalf("discarded %s with Recoveries %d, deliveries %d; want a, 3, 3", m.ID, m.Recoveries, n)
	}
}
