package stream_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/limits"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The shared suite (brokertest: LimitKind, LimitQueue, LimitLeaseExpiry,
// LimitCancel) holds the promises of concurrency limits; these tests hold
// the stream driver's own ways of keeping them: admission of the entries
// a blocking read returns, the slots a takeover keeps or takes, and
// admit.lua's checks of the entries it is given.

// kinded returns message id of queue with kind k.
func kinded(queue, id, k string) *broker.Message {
	m := msg(queue, id)
	m.Kind = k
	return m
}

// setLimit sets queue's limit of kind to n.
func (e *env) setLimit(queue, kind string, n int) {
	e.t.Helper()
	if err := e.d.SetLimit(context.Background(), queue, kind, n); err != nil {
		e.t.Fatalf("SetLimit(%q, %q, %d): %v", queue, kind, n, err)
	}
}

// wantLimit fails the test unless queue's limit of kind has running slots
// held and waiting jobs.
func (e *env) wantLimit(queue, kind string, running, waiting int64) {
	e.t.Helper()
	ls, err := e.d.Limits(context.Background(), queue)
	if err != nil {
		e.t.Fatalf("Limits(%q): %v", queue, err)
	}
	for _, l := range ls {
		if l.Kind == kind {
			if l.Running != running || l.Waiting != waiting {
				e.t.Fatalf("limit %q: %+v, want %d running, %d waiting", kind, l, running, waiting)
			}
			return
		}
	}
	e.t.Fatalf("limit %q not listed (%+v)", kind, ls)
}

// ack acks ds on c and fails the test on error.
func (e *env) ack(c broker.Consumer, ds ...*broker.Delivery) {
	e.t.Helper()
	if err := c.Ack(context.Background(), ds...); err != nil {
		e.t.Fatalf("Ack: %v", err)
	}
}

// TestLimitBlockingReadAdmits: the entries a blocking XREADGROUP returns
// take their slots before Fetch hands them out: a consumer blocked on its
// queue when three jobs of a kind limited to one arrive is handed one, and
// the other two wait in the limit's line.
func TestLimitBlockingReadAdmits(t *testing.T) {
	t.Parallel()
	name := randomName()
	rdb := namedClient(t, name)
	e := newEnvWith(t, rdb, nil)
	const q = "limit-block"
	c := e.open(q, time.Minute)
	// A blocking read needs the stream: one job of another kind makes it.
	e.enqueue(msg(q, "first"))
	e.ack(c, e.fetch(c, 1)...)
	e.setLimit(q, "k", 1)

	type result struct {
		ds  []*broker.Delivery
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ds, err := c.Fetch(ctx, 10)
		done <- result{ds, err}
	}()
	waitBlocked(t, rdb, name, "xreadgroup")
	e.enqueue(kinded(q, "a", "k"), kinded(q, "b", "k"), kinded(q, "c", "k"))
	r := <-done
	if r.err != nil {
		t.Fatalf("Fetch: %v", r.err)
	}
	if len(r.ds) != 1 || r.ds[0].ID != "a" {
		t.Fatalf("the blocked Fetch delivered %v, want [a]", ids(r.ds))
	}
	e.wantLimit(q, "k", 1, 2)
	e.ack(c, r.ds...)
	d := e.fetch(c, 10)
	if len(d) != 1 || d[0].ID != "b" || d[0].Retries != 0 {
		t.Fatalf("after the ack, delivered %v, want [b] with no attempt counted", ids(d))
	}
	e.ack(c, d...)
}

// TestLimitSlotsFollowTakeover: a delivery holds its slots under its entry
// ID, which a takeover keeps: the consumer that takes an expired delivery
// over runs it with the slot it held (none is taken twice, no waiting job
// is let in), and the dead holder's refused settle gives nothing back.
func TestLimitSlotsFollowTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 50 * time.Millisecond})
	const q = "limit-takeover"
	const vt = 200 * time.Millisecond
	e.setLimit(q, "k", 1)
	e.enqueue(kinded(q, "a", "k"), kinded(q, "b", "k"))
	dead := e.open(q, vt)
	held := e.fetch(dead, 10)
	if len(held) != 1 || held[0].ID != "a" {
		t.Fatalf("delivered %v, want [a]", ids(held))
	}
	e.wantLimit(q, "k", 1, 1)

	live := e.open(q, vt)
	again := e.fetch(live, 10)
	if len(again) != 1 || again[0].ID != "a" || again[0].Recoveries != 1 {
		t.Fatalf("took over %v, want [a] with one recovery", ids(again))
	}
	e.wantLimit(q, "k", 1, 1)
	if err := dead.Ack(context.Background(), held[0]); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("Ack by the dead holder: %v, want ErrLeaseLost", err)
	}
	e.wantLimit(q, "k", 1, 1)
	e.ack(live, again...)
	next := e.fetch(live, 10)
	if len(next) != 1 || next[0].ID != "b" {
		t.Fatalf("after the ack, delivered %v, want [b]", ids(next))
	}
	e.wantLimit(q, "k", 1, 0)
	e.ack(live, next...)
	e.wantLimit(q, "k", 0, 0)
}

// TestLimitTakeoverAdmitsUnheldEntries: entries read before their queue had
// limits hold no slot; a takeover admits them as a read does: the first
// takes the slot, the second waits in the line, with the recovery the
// takeover counted kept in its message.
func TestLimitTakeoverAdmitsUnheldEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 50 * time.Millisecond})
	const q = "limit-unheld"
	const vt = 200 * time.Millisecond
	e.enqueue(kinded(q, "a", "k"), kinded(q, "b", "k"))
	dead := e.open(q, vt)
	if ds := e.fetch(dead, 10); len(ds) != 2 {
		t.Fatalf("delivered %v, want [a b]", ids(ds))
	}
	e.setLimit(q, "k", 1)

	live := e.open(q, vt)
	got := e.fetch(live, 10)
	if len(got) != 1 || got[0].ID != "a" || got[0].Recoveries != 1 {
		t.Fatalf("took over %v, want [a] with one recovery", ids(got))
	}
	e.wantLimit(q, "k", 1, 1)
	e.ack(live, got...)
	next := e.fetch(live, 10)
	if len(next) != 1 || next[0].ID != "b" || next[0].Recoveries != 1 || next[0].Retries != 0 {
		t.Fatalf("after the ack, delivered %v (%+v), want b with one recovery and no attempt", ids(next), next)
	}
	e.ack(live, next...)
	e.wantLimit(q, "k", 0, 0)
}

// TestLimitAdmitChecksEntries: admit.lua admits only the entries still
// pending for the consumer that read them, and removes those whose job was
// cancelled since the read (parked, the job would keep no mark and run
// later); neither takes a slot nor waits in a line.
func TestLimitAdmitChecksEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	const q = "limit-admit"
	e.setLimit(q, "k", 1)
	e.enqueue(kinded(q, "a", "k"), kinded(q, "b", "k"), kinded(q, "c", "k"))
	c := e.open(q, time.Minute)
	// A read of c's whose entries are not admitted yet.
	streams, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: "conveyor", Consumer: stream.ConsumerName(c), Streams: []string{e.key(q, "stream"), ">"}, Count: 10, Block: -1,
	}).Result()
	if err != nil || len(streams) != 1 || len(streams[0].Messages) != 3 {
		t.Fatalf("XREADGROUP = %v, %v; want the three entries", streams, err)
	}
	msgs := streams[0].Messages
	if st, err := e.d.CancelJob(ctx, q, "b"); err != nil || st != broker.JobInFlight {
		t.Fatalf("CancelJob(b) = %v, %v; want JobInFlight", st, err)
	}
	if err := e.rdb.XClaim(ctx, &redis.XClaimArgs{
		Stream: e.key(q, "stream"), Group: "conveyor", Consumer: "other", Messages: []string{msgs[2].ID},
	}).Err(); err != nil {
		t.Fatalf("XCLAIM: %v", err)
	}

	admitted, err := stream.Admit(ctx, c, msgs)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if len(admitted) != 1 || admitted[0].ID != msgs[0].ID {
		t.Fatalf("admitted %v, want only a's entry %s", admitted, msgs[0].ID)
	}
	e.wantLimit(q, "k", 1, 0)
	if _, _, _, ok := e.pending(q, msgs[1].ID); ok {
		t.Fatal("the cancelled entry is still pending")
	}
	if n, _ := e.rdb.Exists(ctx, e.key(q, "canceled")).Result(); n != 0 {
		t.Fatal("the mark outlived its entry")
	}
	if owner, _, _, ok := e.pending(q, msgs[2].ID); !ok || owner != "other" {
		t.Fatalf("the entry taken over: pending %v for %q, want pending for other", ok, owner)
	}
}

// TestLimitPoisonGivesSlotBack: an entry a takeover discards as poison ends
// its delivery there: its slot comes back and lets the waiting job in.
func TestLimitPoisonGivesSlotBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 20 * time.Millisecond, MaxRecoveries: 1})
	const q = "limit-poison"
	e.setLimit(q, "k", 1)
	e.enqueue(kinded(q, "a", "k"), kinded(q, "b", "k"))
	c := e.open(q, 100*time.Millisecond)
	if ds := e.fetch(c, 10); len(ds) != 1 || ds[0].ID != "a" {
		t.Fatalf("delivered %v, want [a]", ids(ds))
	}
	next := e.fetch(c, 10)
	if len(next) != 1 || next[0].ID != "b" {
		t.Fatalf("after a's lease ran out, delivered %v, want [b]", ids(next))
	}
	if s := e.d.Stats(); s.Poisoned != 1 {
		t.Fatalf("Stats() = %+v, want Poisoned 1", s)
	}
	e.wantLimit(q, "k", 1, 0)
	e.ack(c, next...)
	e.wantLimit(q, "k", 0, 0)
}

// TestLimitRecordedAckGivesSlotBack: an ack that writes the job's record
// (ack_record.lua) gives the delivery's slot back as a plain ack does.
func TestLimitRecordedAckGivesSlotBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "limit-record"
	e.setLimit(q, "k", 1)
	e.enqueue(kinded(q, "a", "k"), kinded(q, "b", "k"))
	c := e.open(q, time.Minute)
	ds := e.fetch(c, 10)
	if len(ds) != 1 || ds[0].ID != "a" {
		t.Fatalf("delivered %v, want [a]", ids(ds))
	}
	ds[0].Finish = finishRecord(ds[0], "succeeded", time.Hour)
	e.ack(c, ds...)
	next := e.fetch(c, 10)
	if len(next) != 1 || next[0].ID != "b" {
		t.Fatalf("after the ack, delivered %v, want [b]", ids(next))
	}
	e.ack(c, next...)
	e.wantLimit(q, "k", 0, 0)
}

// TestFailedFetchScriptHandsBack: Redis keeps what a script wrote before
// it failed, so entries a fetch round read but a later command of the same
// round failed on (here a limit key of the wrong type) are pending for the
// consumer, never handed out. The next round hands them back at once, no
// recovery counted, whether fetch.lua (a takeover pass) or admit.lua (after
// a plain read) failed, and the log line says which.
func TestFailedFetchScriptHandsBack(t *testing.T) {
	t.Parallel()
	// The first round runs a pass (fetch.lua); later ones plain reads.
	e := newEnv(t, &stream.Config{PollInterval: time.Hour})
	const q = "fetch-script-fails"
	c := e.open(q, time.Minute)
	e.setLimit(q, "k", 5)
	ctx := context.Background()
	state := limits.QueueKeys(e.prefix, q).State
	for _, step := range []struct{ id, script, why string }{
		{"a", "stream/fetch", "the fetch script failed"},
		{"b", "stream/admit", "their admission failed"},
	} {
		e.enqueue(kinded(q, step.id, "k"))
		if err := e.rdb.Set(ctx, state, "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ds, err := c.Fetch(fctx, 10)
		cancel()
		if err == nil || !strings.Contains(err.Error(), step.script+": WRONGTYPE") {
			t.Fatalf("Fetch with a broken limit key = %v, %v; want %s's WRONGTYPE", ids(ds), err, step.script)
		}
		if err := e.rdb.Del(ctx, state).Err(); err != nil {
			t.Fatal(err)
		}
		d := e.fetch(c, 10)
		if len(d) != 1 || d[0].ID != step.id || d[0].Recoveries != 0 {
			t.Fatalf("after %s failed, delivered %v, want [%s] with no recovery counted", step.script, ids(d), step.id)
		}
		e.ack(c, d...)
		if e.logs.findWith(slog.LevelWarn, "handed back", "why="+step.why) == "" {
			t.Fatalf("no hand-back logged with %q after %s failed", step.why, step.script)
		}
	}
}

// TestRetryWhoseTimerFailsRunsAgainAtOnce: Redis keeps what a script wrote
// before it failed, so requeue.lua, which acks and deletes the entry before
// it stores the retry's timer, sends the message back to the stream at
// once when the timer cannot be stored (here the queue's timers key holds
// another type): the retry runs without its wait rather than being lost.
func TestRetryWhoseTimerFailsRunsAgainAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "retry-timer-fails"
	ctx := context.Background()
	c := e.open(q, time.Minute)
	e.enqueue(msg(q, "a"))
	d := e.fetch(c, 10)
	if len(d) != 1 {
		t.Fatalf("fetched %v, want [a]", ids(d))
	}
	k := timers.QueueKeys(e.prefix, q).Timers
	if err := e.rdb.Set(ctx, k, "not a timer", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Retry(ctx, d[0], time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Retry with the timers key broken: %v", err)
	}
	again := e.fetch(c, 10)
	if len(again) != 1 || again[0].ID != "a" || again[0].Retries != 1 {
		t.Fatalf("with the timers key broken, the retry delivered %v, want [a] at once, one retry counted", ids(again))
	}
	if n, err := e.rdb.ZCard(ctx, timers.QueueKeys(e.prefix, q).Delayed).Result(); err != nil || n != 0 {
		t.Fatalf("timers left by the failed one: %d (%v), want 0", n, err)
	}
	e.ack(c, again...)
}
