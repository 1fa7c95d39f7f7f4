package stream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// poisonLease is the visibility timeout of the poison tests: short, so that
// leases run out quickly, and several PollIntervals long, so that a blocked
// Fetch looks for them in time.
const poisonLease = 50 * time.Millisecond

// backends runs f on real Redis and on miniredis, whose XAUTOCLAIM bumps
// delivery counts in its own code: the poison count depends on them.
func backends(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.Client(t))
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rc.Close() })
		f(t, rc)
	})
}

// fetchExpecting fetches one delivery of id with recoveries, and leaves it
// unsettled: its lease runs out, as when the worker holding it is killed.
func (e *env) fetchExpecting(c broker.Consumer, id string, recoveries int) *broker.Delivery {
	e.t.Helper()
	d := e.fetch(c, 10)
	if len(d) != 1 || d[0].ID != id || d[0].Recoveries != recoveries || d[0].Retries != 0 {
		e.t.Fatalf("fetched %v, want only %s with Recoveries %d, Retries 0 (got %+v)", ids(d), id, recoveries, d[0].Message)
	}
	return d[0]
}

// awaitPoisoned waits, fetching on c with short deadlines, until the driver
// has discarded n messages as poison. No Fetch may deliver anything
// meanwhile: the messages it waits for must not be delivered again.
func (e *env) awaitPoisoned(c broker.Consumer, n int64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.d.Stats().Poisoned
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d messages discarded as poison after 10s, want %d", got, n)
		}
		// Each Fetch blocks (several visibility timeouts) in which the
		// consumer looks for expired leases.
		ctx, cancel := context.WithTimeout(context.Background(), 4*poisonLease)
		ds, err := c.Fetch(ctx, 10)
		cancel()
		if len(ds) > 0 || !errors.Is(err, context.DeadlineExceeded) {
			e.t.Fatalf("Fetch delivered %v (%v), want nothing until the deadline", ids(ds), err)
		}
	}
}

// poisonRecords returns the decoded discard records of queue, newest first,
// with their messages.
func (e *env) poisonRecords(queue string) ([]codec.Discarded, []broker.Message) {
	e.t.Helper()
	raw, err := e.rdb.LRange(context.Background(), e.key(queue, "dead"), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	recs := make([]codec.Discarded, len(raw))
	msgs := make([]broker.Message, len(raw))
	for i, s := range raw {
		if recs[i], err = codec.DecodeDiscarded([]byte(s)); err != nil {
			e.t.Fatalf("record %d: %v", i, err)
		}
		if _, err := codec.Decode(recs[i].Message, &msgs[i]); err != nil {
			e.t.Fatalf("record %d: message: %v", i, err)
		}
	}
	return recs, msgs
}

// A message whose lease expires MaxRecoveries (default 3) times goes to the
// discard list with a poison reason and its recoveries, instead of being
// delivered a fourth time; it is counted, logged, and the queue keeps
// working.
func TestPoisonDiscarded(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnvWith(t, rdb, &stream.Config{PollInterval: 10 * time.Millisecond})
		e.enqueue(msg("q", "a"))
		var receipt string
		for i := range 3 {
			// A new consumer each time, as a restarted worker would be.
			receipt = e.fetchExpecting(e.open("q", poisonLease), "a", i).Receipt
		}
		c := e.open("q", poisonLease)
		before := time.Now().Add(-time.Second)
		e.awaitPoisoned(c, 1)

		recs, msgs := e.poisonRecords("q")
		if len(recs) != 1 {
			t.Fatalf("discard list holds %d records, want 1", len(recs))
		}
		if want := "conveyor: poison: lease expired 3 times"; recs[0].Reason != want || !strings.HasPrefix(recs[0].Reason, broker.PoisonReason) {
			t.Fatalf("reason %q, want %q", recs[0].Reason, want)
		}
		if recs[0].At.Before(before) || recs[0].At.After(time.Now().Add(time.Second)) {
			t.Fatalf("discarded at %v, want about now", recs[0].At)
		}
		m := msgs[0]
		if m.ID != "a" || m.Recoveries != 3 || m.Retries != 0 || !bytes.Equal(m.Payload, []byte("payload of a")) {
			t.Fatalf("discarded message %s recoveries %d attempt %d payload %q, want a, 3, 0", m.ID, m.Recoveries, m.Retries, m.Payload)
		}
		if s := e.d.Stats(); s.Poisoned != 1 || s.Reclaimed != 2 {
			t.Fatalf("Stats() = %+v, want Poisoned 1, Reclaimed 2", s)
		}
		rec := e.logs.find(slog.LevelWarn, "poison")
		if !strings.Contains(rec, receipt) || !strings.Contains(rec, "queue=q") || !strings.Contains(rec, "message_ids=[a]") {
			t.Fatalf("warning %q does not name entry %s, message a of queue q", rec, receipt)
		}
		// The stream was left empty with nothing pending: deleted, as ack does.
		if k := e.keys(); !slices.Equal(k, []string{e.key("q", "dead")}) {
			t.Fatalf("keys %v, want only the discard list", k)
		}

		// Never delivered again; the queue goes on with new messages.
		e.enqueue(msg("q", "b"))
		if err := c.Ack(context.Background(), e.fetchExpecting(c, "b", 0)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*poisonLease)
		defer cancel()
		if ds, err := c.Fetch(ctx, 10); len(ds) > 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fetch after the poison discard: %v (%v), want nothing", ids(ds), err)
		}
	})
}

// The cap counts recoveries carried in the stored message (a release after
// a recovery starts a new entry, with a new delivery count) plus those of
// the current entry.
func TestPoisonCountsCarriedRecoveries(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnvWith(t, rdb, &stream.Config{PollInterval: 10 * time.Millisecond})
		e.enqueue(msg("q", "a"))
		c := e.open("q", poisonLease)
		e.fetchExpecting(c, "a", 0)
		d := e.fetchExpecting(c, "a", 1) // reclaimed: delivery count 2
		if err := c.Release(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		e.fetchExpecting(c, "a", 1) // new entry: count 1, 1 recovery carried
		e.fetchExpecting(c, "a", 2) // count 2
		e.awaitPoisoned(c, 1)       // count 3: 1 + 2 recoveries

		recs, msgs := e.poisonRecords("q")
		if len(recs) != 1 || recs[0].Reason != "conveyor: poison: lease expired 3 times" || msgs[0].Recoveries != 3 {
			t.Fatalf("records %+v, messages %+v: want one, lease expired 3 times, Recoveries 3", recs, msgs)
		}
		if n := e.d.Stats().Poisoned; n != 1 {
			t.Fatalf("Stats().Poisoned = %d, want 1", n)
		}
	})
}

// A negative MaxRecoveries turns the cap off: the message is delivered
// after any number of lease expiries.
func TestPoisonCapOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 10 * time.Millisecond, MaxRecoveries: -1})
	e.enqueue(msg("q", "a"))
	c := e.open("q", poisonLease)
	var d *broker.Delivery
	for i := range 6 {
		d = e.fetchExpecting(c, "a", i)
	}
	if err := c.Ack(context.Background(), d); err != nil {
		t.Fatalf("Ack after 5 recoveries: %v", err)
	}
	if s := e.d.Stats(); s.Poisoned != 0 || s.Reclaimed != 5 {
		t.Fatalf("Stats() = %+v, want Poisoned 0, Reclaimed 5", s)
	}
	if k := e.keys(); len(k) != 0 {
		t.Fatalf("keys %v, want none (no discard list)", k)
	}
}

// MaxRecoveries 1 discards on the first lease expiry. Messages poisoned
// together are all discarded, and the discard list keeps its cap.
func TestPoisonFirstExpiry(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		e := newEnvWith(t, rdb, &stream.Config{PollInterval: 10 * time.Millisecond, MaxRecoveries: 1, DiscardMax: 1})
		e.enqueue(msg("q", "a"), msg("q", "b"))
		c := e.open("q", poisonLease)
		if ds := e.fetch(c, 10); !slices.Equal(ids(ds), []string{"a", "b"}) {
			t.Fatalf("fetched %v, want [a b]", ids(ds))
		}
		e.awaitPoisoned(c, 2)
		// Both records were pushed; the cap kept the newest.
		recs, msgs := e.poisonRecords("q")
		if len(recs) != 1 || recs[0].Reason != "conveyor: poison: lease expired 1 times" || msgs[0].ID != "b" || msgs[0].Recoveries != 1 {
			t.Fatalf("records %+v, messages %+v: want only b, lease expired 1 times, Recoveries 1", recs, msgs)
		}
		if dropped, err := e.rdb.Get(context.Background(), e.key("q", "dead_dropped")).Int(); err != nil || dropped != 1 {
			t.Fatalf("dead_dropped = %d, %v; want 1", dropped, err)
		}
		if s := e.d.Stats(); s.Poisoned != 2 || s.Reclaimed != 0 {
			t.Fatalf("Stats() = %+v, want Poisoned 2, Reclaimed 0", s)
		}
	})
}

// TestPoisonIntoABrokenListKeepsTheEntry: Redis keeps what a script wrote
// before a command of it failed, so fetch.lua records a poison entry in
// the discard list before it deletes the entry: with a discard list of
// another type (written by hand) the fetch fails and the job is still in
// the stream, not gone.
func TestPoisonIntoABrokenListKeepsTheEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 10 * time.Millisecond, MaxRecoveries: 1})
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	c := e.open("q", poisonLease)
	e.fetchExpecting(c, "a", 0)
	dead := e.key("q", "dead")
	if err := e.rdb.Set(ctx, dead, "not a list", 0).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no fetch failed on the discard list of another type within 10s")
		}
		fctx, cancel := context.WithTimeout(ctx, 4*poisonLease)
		ds, err := c.Fetch(fctx, 10)
		cancel()
		if len(ds) > 0 {
			t.Fatalf("Fetch delivered %v, want the poison entry kept back", ids(ds))
		}
		if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
			break
		}
	}
	if n, err := e.rdb.XLen(ctx, e.key("q", "stream")).Result(); err != nil || n != 1 {
		t.Fatalf("stream length after the failed poison discard: %d (%v), want 1 (the job kept)", n, err)
	}
}
