package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A blocked Fetch wakes on Enqueue well before PollInterval, both when the
// stream exists and when it does not exist yet.
func TestFetchWakesOnEnqueue(t *testing.T) {
	t.Parallel()
	for _, exists := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream_exists=%v", exists), func(t *testing.T) {
			t.Parallel()
			name := randomName()
			e := newEnvWith(t, namedClient(t, name), &stream.Config{PollInterval: time.Minute})
			cmd := "xread"
			if exists {
				// Another consumer's pending entry keeps the stream alive.
				e.enqueue(msg("q", "held"))
				e.fetch(e.open("q", 0), 1)
				cmd = "xreadgroup"
			}
			c := e.open("q", 0)
			type result struct {
				ds  []*broker.Delivery
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				ds, err := c.Fetch(ctx, 10)
				done <- result{ds, err, time.Now()}
			}()
			waitBlocked(t, e.rdb, name, cmd)
			sent := time.Now()
			e.enqueue(msg("q", "new"))
			r := <-done
			if r.err != nil || len(r.ds) != 1 || r.ds[0].ID != "new" {
				t.Fatalf("Fetch: %v %v", r.err, r.ds)
			}
			if lag := r.at.Sub(sent); lag > 2*time.Second {
				t.Fatalf("Fetch returned %v after Enqueue; it did not wake", lag)
			}
		})
	}
}

// A Fetch blocked on an empty queue returns ctx.Err() at once when ctx is
// cancelled; an entry its read receives afterwards is handed back at once
// rather than waiting out the 1-minute lease.
func TestFetchCancelReleases(t *testing.T) {
	t.Parallel()
	name := randomName()
	e := newEnvWith(t, namedClient(t, name), &stream.Config{PollInterval: 5 * time.Second})
	e.enqueue(msg("q", "held"))
	e.fetch(e.open("q", 0), 1) // keeps the stream alive

	c1 := e.open("q", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c1.Fetch(ctx, 10)
		done <- err
	}()
	waitBlocked(t, e.rdb, name, "xreadgroup")
	start := time.Now()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch after cancel: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Fetch took %v to return after cancel", d)
	}

	// c1's abandoned read is still blocked: it takes this entry and must
	// hand it back.
	e.enqueue(msg("q", "late"))
	c2 := e.open("q", time.Minute)
	d := e.fetch(c2, 10)
	if len(d) != 1 || d[0].ID != "late" || d[0].Retries != 0 || d[0].Recoveries != 0 || d[0].Token != d[0].Receipt+"/1" {
		t.Fatalf("c2 got %v, want the released entry with fresh counters", ids(d))
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelClose()
	if err := c1.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := e.d.Stats().Released; n != 1 {
		t.Fatalf("Stats().Released = %d, want 1", n)
	}
}

func TestCloseUnblocksFetch(t *testing.T) {
	t.Parallel()
	name := randomName()
	e := newEnvWith(t, namedClient(t, name), &stream.Config{PollInterval: 2 * time.Second})
	c := e.open("q", 0)
	done := make(chan error, 1)
	go func() {
		_, err := c.Fetch(context.Background(), 1)
		done <- err
	}()
	waitBlocked(t, e.rdb, name, "xread")
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Fetch after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Fetch(context.Background(), 1); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Fetch on a closed consumer: %v, want ErrClosed", err)
	}
}

func TestDelayedPromoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: time.Minute})
	m := msg("q", "later")
	m.RunAt = time.Now().Add(300 * time.Millisecond)
	e.enqueue(m, msg("q", "now"))
	c := e.open("q", 0)
	if d := e.fetch(c, 10); len(d) != 1 || d[0].ID != "now" {
		t.Fatalf("first fetch %v, want [now]", ids(d))
	}
	if n, _ := e.rdb.ZCard(context.Background(), e.key("q", "delayed")).Result(); n != 1 {
		t.Fatalf("delayed set holds %d, want 1", n)
	}
	brokertest.Promote(t, e.d, "q")
	d := e.fetch(c, 10) // the promoter's XADD wakes it when due, not after a minute
	at := time.Now()
	if len(d) != 1 || d[0].ID != "later" {
		t.Fatalf("second fetch %v, want [later]", ids(d))
	}
	if at.Before(m.RunAt.Add(-20*time.Millisecond)) || at.After(m.RunAt.Add(3*time.Second)) {
		t.Fatalf("delayed message fetched at %v, due at %v", at, m.RunAt)
	}
	if !d[0].RunAt.IsZero() {
		t.Fatalf("RunAt %v came back; it is not stored", d[0].RunAt)
	}
	if n, _ := e.rdb.ZCard(context.Background(), e.key("q", "delayed")).Result(); n != 0 {
		t.Fatalf("delayed set holds %d after promotion", n)
	}
}

func TestCloseRemovesEmptyConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 20 * time.Millisecond})
	e.enqueue(msg("q", "a"), msg("q", "b"))
	busy := e.open("q", 0)
	idle := e.open("q", 0)
	d := e.fetch(busy, 1)[0]
	// Redis 7 adds a consumer to the group when it first reads an entry.
	if err := idle.Ack(context.Background(), e.fetch(idle, 1)...); err != nil {
		t.Fatal(err)
	}

	consumers := func() []string {
		cs, err := e.rdb.XInfoConsumers(context.Background(), e.key("q", "stream"), "conveyor").Result()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range cs {
			names = append(names, c.Name)
		}
		slices.Sort(names)
		return names
	}
	both := []string{stream.ConsumerName(busy), stream.ConsumerName(idle)}
	slices.Sort(both)
	if got := consumers(); !slices.Equal(got, both) {
		t.Fatalf("consumers %v, want %v", got, both)
	}
	if err := idle.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := busy.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := consumers(); !slices.Equal(got, []string{stream.ConsumerName(busy)}) {
		t.Fatalf("consumers after Close %v, want only the one holding an entry", got)
	}
	// Deliveries outlive Close.
	if err := busy.Ack(context.Background(), d); err != nil {
		t.Fatalf("Ack after Close: %v", err)
	}
}

// Producers and consumers race on an often empty queue, so the stream is
// deleted and recreated many times: every message is delivered once and
// nothing is left.
func TestConcurrentDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: 50 * time.Millisecond})
	const producers, perProducer, consumers = 4, 150, 4
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var mu sync.Mutex
	seen := map[string]int{}
	total := producers * perProducer
	allDone := make(chan struct{})
	var wg sync.WaitGroup
	for i := range consumers {
		c := e.open("q", time.Minute)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ds, err := c.Fetch(ctx, 1+i*3)
				if err != nil {
					select {
					case <-allDone:
					default:
						t.Errorf("Fetch: %v", err)
					}
					return
				}
				if err := c.Ack(ctx, ds...); err != nil {
					t.Errorf("Ack: %v", err)
					return
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				n := len(seen)
				mu.Unlock()
				if n == total {
					select {
					case <-allDone:
					default:
						close(allDone)
					}
				}
			}
		}()
	}
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range perProducer {
				if err := e.d.Enqueue(ctx, []*broker.Message{msg("q", fmt.Sprintf("p%d-%d", p, i))}); err != nil {
					t.Errorf("Enqueue: %v", err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	select {
	case <-allDone:
	case <-ctx.Done():
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		t.Fatalf("only %d of %d messages delivered", n, total)
	}
	cancel()
	wg.Wait()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	if k := e.keys(); len(k) != 0 {
		t.Fatalf("keys left: %v", k)
	}
}

// An entry that does not hold a decodable message (written by hand) goes to
// the discard list instead of failing every Fetch.
func TestUndecodableEntryDiscarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &stream.Config{PollInterval: time.Minute})
	e.enqueue(msg("q", "before"))
	ctx := context.Background()
	for _, values := range [][]any{{"m", "garbage"}, {"other", "x"}} {
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.key("q", "stream"), Values: values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueue(msg("q", "after"))
	c := e.open("q", 0)
	var got []string
	for len(got) < 2 {
		for _, d := range e.fetch(c, 1) {
			got = append(got, d.ID)
			if err := c.Ack(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(got, []string{"before", "after"}) {
		t.Fatalf("fetched %v, want [before after]", got)
	}
	recs, err := e.rdb.LRange(ctx, e.key("q", "dead"), 0, -1).Result()
	if err != nil || len(recs) != 2 {
		t.Fatalf("discard list %q (%v), want 2 records", recs, err)
	}
	rec, err := codec.DecodeDiscarded([]byte(recs[1]))
	if err != nil || string(rec.Message) != "garbage" || !strings.Contains(rec.Reason, "malformed") {
		t.Fatalf("record %+v (%v), want the garbage entry with a reason", rec, err)
	}
	if e.logs.find(slog.LevelError, "undecodable") == "" {
		t.Fatal("no error logged for the undecodable entry")
	}
	if k := e.keys(); !slices.Equal(k, []string{e.key("q", "dead")}) {
		t.Fatalf("keys %v, want only the discard list", k)
	}
}

// countHook counts the commands a client sends, handshakes aside.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// Connection handshakes (a new pool connection) are not load.
		if name := cmd.Name(); name != "hello" && name != "client" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// An idle consumer sends about two commands per PollInterval, whether the
// stream exists or not.
func TestIdleLoad(t *testing.T) {
	t.Parallel()
	for _, exists := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream_exists=%v", exists), func(t *testing.T) {
			t.Parallel()
			rdb := redistest.NewClient(t)
			e := newEnvWith(t, rdb, &stream.Config{PollInterval: 500 * time.Millisecond})
			if exists {
				e.enqueue(msg("q", "held"))
				e.fetch(e.open("q", time.Minute), 1)
			}
			c := e.open("q", time.Minute)
			hook := &countHook{}
			rdb.AddHook(hook)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := c.Fetch(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Fetch: %v", err)
			}
			// 2s / 500ms = 4 rounds of fetch.lua + one blocking read.
			if n := hook.n.Load(); n < 4 || n > 10 {
				t.Fatalf("idle Fetch sent %d commands in 2s, want about 8", n)
			}
		})
	}
}

// openKept opens a kept consumer (a worker pool's) on e's queue "q" once
// the stream and its group exist, with no wake signal left over (an
// enqueue's signal, which no kept consumer took, would wake it once).
func openKept(t *testing.T, e *env) broker.Consumer {
	t.Helper()
	e.enqueue(msg("q", "first"))
	first := e.open("q", time.Minute)
	if err := first.Ack(context.Background(), e.fetch(first, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(context.Background(), e.key("q", "wake")).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := e.d.Open(context.Background(), "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute, Kept: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestKeptIdleLoad: a kept consumer reads once and then sleeps on the wake
// signals until its context ends, whatever its PollInterval: three
// commands in 2s, where one that is not kept sends about eight
// (TestIdleLoad).
func TestKeptIdleLoad(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	e := newEnvWith(t, rdb, &stream.Config{PollInterval: 500 * time.Millisecond})
	c := openKept(t, e)
	hook := &countHook{}
	rdb.AddHook(hook)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Fetch(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch: %v", err)
	}
	// One round (its first pass: fetch.lua), then BZPOPMIN until the
	// deadline: two, as the client's helper takes whole seconds (1s, then
	// the 0.99s left), and a third of a few milliseconds when the server's
	// timeout ends the second just before the deadline.
	if n := hook.n.Load(); n > 4 {
		t.Fatalf("an idle kept Fetch sent %d commands in 2s, want at most 4", n)
	}
}

// TestKeptWakeReadsWithoutPass: a kept consumer woken for a new entry after
// sleeping longer than its PollInterval reads it with one plain XREADGROUP:
// it was idle, so it runs no takeover pass of its own (fetch.lua), and no
// wait ran out in between: a fleet of idle consumers pays no pass per job.
// The keeper's reclaim signal still asks for one at once (KeptRecovery in
// the conformance suite, TestReclaimShared).
func TestKeptWakeReadsWithoutPass(t *testing.T) {
	t.Parallel()
	const poll = 50 * time.Millisecond
	name := randomName()
	rdb := namedClient(t, name)
	e := newEnvWith(t, rdb, &stream.Config{PollInterval: poll})
	producer, err := stream.New(redistest.Client(t), &stream.Config{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	c := openKept(t, e)
	log := &drivertest.CmdLog{}
	rdb.AddHook(log)
	for i := range 3 {
		type result struct {
			ds  []*broker.Delivery
			err error
		}
		got := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ds, err := c.Fetch(ctx, 10)
			got <- result{ds, err}
		}()
		waitBlocked(t, rdb, name, "bzpopmin")
		log.Take()
		// Asleep for several of its PollIntervals: the condition under
		// test, not a synchronisation.
		<-time.After(4 * poll)
		if err := producer.Enqueue(context.Background(), []*broker.Message{msg("q", fmt.Sprint("job-", i))}); err != nil {
			t.Fatal(err)
		}
		r := <-got
		var names []string
		for _, trip := range log.Take() {
			names = append(names, trip...)
		}
		if r.err != nil || len(r.ds) != 1 {
			t.Fatalf("job %d: Fetch = %d deliveries, %v", i, len(r.ds), r.err)
		}
		if slices.Contains(names, "evalsha") || slices.Contains(names, "eval") {
			t.Fatalf("job %d: the woken consumer ran a takeover pass: %v", i, names)
		}
		if slices.Contains(names, "bzpopmin") {
			t.Fatalf("job %d: the consumer's wait ran out while asleep for 4 PollIntervals: %v", i, names)
		}
		if !slices.Contains(names, "xreadgroup") {
			t.Fatalf("job %d: no XREADGROUP among %v", i, names)
		}
		if err := c.Ack(context.Background(), r.ds...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReclaimShared: the keeper's reclaim signal wakes one sleeping kept
// consumer, which takes a share of the expired leases and wakes the next:
// a crash's jobs go back to several workers, not all to the first.
func TestReclaimShared(t *testing.T) {
	t.Parallel()
	names := [2]string{randomName(), randomName()}
	e := newEnvWith(t, namedClient(t, names[0]), nil)
	d1, err := stream.New(namedClient(t, names[1]), &stream.Config{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	// Eight jobs leased to a consumer that dies with them (its lease
	// is short), after the stream and its group exist.
	var held []*broker.Message
	for i := range 8 {
		held = append(held, msg("q", fmt.Sprint("held-", i)))
	}
	e.enqueue(held...)
	const vt = time.Second // the takeover's idle bound is the taker's lease
	dead := e.open("q", vt)
	if got := e.fetch(dead, 8); len(got) != 8 {
		t.Fatalf("fetched %d of 8", len(got))
	}
	if err := e.rdb.Del(context.Background(), e.key("q", "wake")).Err(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		who int
		ds  []*broker.Delivery
		err error
	}
	got := make(chan result, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, d := range []*stream.Driver{e.d, d1} {
		c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: vt, Kept: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		go func() {
			ds, err := c.Fetch(ctx, 8)
			got <- result{i, ds, err}
		}()
		waitBlocked(t, e.rdb, names[i], "bzpopmin")
	}
	// Upkeep signals once the leases have expired (XPENDING ... IDLE).
	var rs []result
	for len(rs) == 0 {
		if _, err := e.d.Upkeep(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			rs = append(rs, r)
		case <-time.After(10 * time.Millisecond): // the lease runs out meanwhile
		}
	}
	rs = append(rs, <-got)
	counts := map[int]int{}
	for _, r := range rs {
		if r.err != nil {
			t.Fatalf("consumer %d: Fetch: %v (got so far: %v)", r.who, r.err, counts)
		}
		for _, d := range r.ds {
			if d.Recoveries != 1 {
				t.Fatalf("consumer %d got %s with %d recoveries, want 1", r.who, d.Message.ID, d.Recoveries)
			}
		}
		counts[r.who] = len(r.ds)
	}
	if counts[0] != 2 || counts[1] != 2 {
		t.Fatalf("the two woken consumers took %v of the 8 expired leases, want 2 each (a quarter of the 8 asked)", counts)
	}
}

// TestPassStopsAtFreshEntries: a takeover pass ends at the first pending
// entry added less than a visibility timeout ago, since neither it nor any
// later one can have expired: a consumer whose queue has a long pending
// list of fresh entries runs one pass round, then plain reads. A pass that
// walked the whole list ten entries per round (COUNT 1) would take a
// hundred rounds of fetch.lua here, and under a backlog chases the tail of
// a list that grows as fast as it scans.
func TestPassStopsAtFreshEntries(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	e := newEnvWith(t, rdb, &stream.Config{PollInterval: time.Hour})
	var ms []*broker.Message
	for i := range 1010 {
		ms = append(ms, msg("q", fmt.Sprint("m-", i)))
	}
	e.enqueue(ms...)
	holder := e.open("q", time.Minute)
	if got := e.fetch(holder, 1000); len(got) != 1000 {
		t.Fatalf("the holder fetched %d of 1000", len(got))
	}
	c := e.open("q", time.Minute)
	log := &drivertest.CmdLog{}
	rdb.AddHook(log)
	for range 5 {
		e.fetch(c, 1)
	}
	if n := log.Count("evalsha"); n != 1 {
		t.Fatalf("5 fetches ran fetch.lua %d times, want 1 (the first round's pass): %v", n, log.Take())
	}
	if n := log.Count("xreadgroup"); n != 4 {
		t.Fatalf("5 fetches sent %d plain XREADGROUPs, want 4: %v", n, log.Take())
	}
}
