package list_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestFetchBlocksAndWakesOnEnqueue(t *testing.T) {
	t.Parallel()
	rc, name := namedClient(t)
	e := newEnvOn(t, rc, nil)
	c := e.open("q", time.Minute)
	type result struct {
		ds  []*broker.Delivery
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		ds, err := c.Fetch(ctx, 5)
		res <- result{ds, err, time.Now()}
	}()
	waitBlocked(t, rc, name)
	sent := time.Now()
	e.enqueue(msg("q", "a"))
	r := <-res
	if r.err != nil || len(r.ds) != 1 || r.ds[0].ID != "a" {
		t.Fatalf("fetch: %v, %v", ids(r.ds), r.err)
	}
	// A wait that ignored the push would end at its 1s timeout.
	if lat := r.at.Sub(sent); lat > 500*time.Millisecond {
		t.Fatalf("blocked fetch returned %v after the enqueue", lat)
	}
}

// TestOneMessageWakesOneConsumer: five idle consumers sleep in Redis; each
// message stored wakes one of them, which fetches it, while the others
// sleep on without sending a command.
func TestOneMessageWakesOneConsumer(t *testing.T) {
	t.Parallel()
	rc, name := namedClient(t)
	hook := &countingHook{}
	rc.AddHook(hook)
	e := newEnvOn(t, rc, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []*broker.Delivery, 5)
	for range 5 {
		c, err := e.d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute, Kept: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		go func() {
			ds, err := c.Fetch(ctx, 10)
			if err == nil {
				got <- ds
			}
		}()
	}
	redistest.Eventually(t, "5 consumers asleep", func() bool { return blockedCount(t, rc, name) == 5 })
	before := hook.n.Load()
	for i, id := range []string{"a", "b"} {
		e.enqueue(msg("q", id)) // a pipeline: the hook does not count it
		select {
		case ds := <-got:
			if len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("message %s: a consumer fetched %v", id, ids(ds))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %s woke no consumer within 5s", id)
		}
		redistest.Eventually(t, "the others asleep", func() bool { return blockedCount(t, rc, name) == 4-i })
	}
	// Per message: the woken consumer's fetch.lua and its look at the pause
	// key (a consumer asks when a fetch returned messages); the waits'
	// BZPOPMIN were sent before.
	if n := hook.n.Load() - before; n != 4 {
		t.Errorf("the consumers sent %d commands for 2 messages; want 4 (a fetch and a pause look each)", n)
	}
	if len(got) != 0 {
		t.Errorf("another consumer fetched %v", ids(<-got))
	}
}

// TestPushSignalsOnlyOntoEmpty: a push onto jobs already waiting sends its
// LPUSH alone and leaves the wake signal as it was (whoever stored the first
// of them signalled, and a consumer that leaves jobs behind signals again),
// and a push that finds ready empty sets the signal even when the push
// before found jobs waiting (a consumer took them since): with no signal an
// idle consumer would sleep on until the keeper's look, a second later.
func TestPushSignalsOnlyOntoEmpty(t *testing.T) {
	t.Parallel()
	rc := redistest.NewClient(t)
	hook := &countingHook{} // pipelines are not counted
	rc.AddHook(hook)
	e := newEnvOn(t, rc, nil)
	ctx := context.Background()
	wake := e.key("q", "wake")
	signalled := func() bool {
		t.Helper()
		n, err := e.c.Exists(ctx, wake).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	sent := func(id string) int64 {
		t.Helper()
		before := hook.n.Load()
		e.enqueue(msg("q", id))
		return hook.n.Load() - before
	}

	if n := sent("a"); n != 0 || !signalled() {
		t.Fatalf("the first push: %d single commands, signal set %v; want one pipeline with the signal", n, signalled())
	}
	// The push before found ready empty: the signal goes with the LPUSH.
	if n := sent("b"); n != 0 {
		t.Fatalf("the second push sent %d single commands, want one pipeline", n)
	}
	if err := e.c.Del(ctx, wake).Err(); err != nil {
		t.Fatal(err)
	}
	// The push before found a waiting: the LPUSH goes alone.
	if n := sent("c"); n != 1 || signalled() {
		t.Fatalf("a push onto waiting jobs: %d single commands, signal set %v; want the LPUSH alone", n, signalled())
	}

	c := e.open("q", time.Minute)
	if ds, err := c.Fetch(ctx, 10); err != nil || len(ds) != 3 {
		t.Fatalf("Fetch: %v, %v; want a, b and c", ids(ds), err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if signalled() {
		t.Fatal("the signal outlived the fetch that emptied ready: the next check proves nothing")
	}
	// The guess (jobs waiting) is wrong now: the LPUSH, then the signal.
	if n := sent("d"); n != 2 || !signalled() {
		t.Fatalf("a push onto an emptied queue: %d single commands, signal set %v; want the LPUSH and then the signal", n, signalled())
	}
	// d found ready empty: e's signal goes with its LPUSH, and e finds d
	// waiting, so f's LPUSH goes alone.
	if n := sent("e"); n != 0 {
		t.Fatalf("the push after one that found ready empty sent %d single commands, want one pipeline", n)
	}
	if n := sent("f"); n != 1 {
		t.Fatalf("a push onto d and e sent %d single commands, want the LPUSH alone", n)
	}
}

func TestFetchReturnsPromptlyWhenCancelled(t *testing.T) {
	t.Parallel()
	rc, name := namedClient(t)
	e := newEnvOn(t, rc, nil)
	c := e.open("q", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	var at time.Time
	go func() {
		_, err := c.Fetch(ctx, 1)
		at = time.Now()
		res <- err
	}()
	waitBlocked(t, rc, name)
	cancelled := time.Now()
	cancel()
	if err := <-res; err != context.Canceled {
		t.Fatalf("fetch: %v, want context.Canceled", err)
	}
	if lat := at.Sub(cancelled); lat > 200*time.Millisecond {
		t.Fatalf("fetch returned %v after cancel", lat)
	}
}

func TestCloseUnblocksFetch(t *testing.T) {
	t.Parallel()
	rc, name := namedClient(t)
	e := newEnvOn(t, rc, nil)
	c, err := e.d.Open(context.Background(), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := c.Fetch(context.Background(), 1)
		res <- err
	}()
	waitBlocked(t, rc, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := <-res; !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("fetch during close: %v, want ErrClosed", err)
	}
	if blockedIn(t, rc, name) {
		t.Fatal("a wait is still blocked in Redis after Close returned")
	}
	if _, err := c.Fetch(ctx, 1); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("fetch after close: %v, want ErrClosed", err)
	}
}

func TestDelayedMessageIsFetchedOnceDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	runAt := time.Now().Add(400 * time.Millisecond)
	m := msg("q", "later")
	m.RunAt = runAt
	e.enqueue(m, msg("q", "now"))
	if n, _ := e.c.ZCard(ctx, e.key("q", "delayed")).Result(); n != 1 {
		t.Fatalf("delayed holds %d, want 1", n)
	}
	c := e.open("q", time.Minute)
	first := fetch(t, c, 10)
	if got := ids(first); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("first fetch: %v, want only [now]", got)
	}
	brokertest.Promote(t, e.d, "q")
	// This Fetch blocks until the promoter moves the timer to ready when
	// due: its LPUSH wakes the blocked Fetch.
	second := fetch(t, c, 10)
	got := time.Now()
	if ids(second)[0] != "later" || len(second) != 1 {
		t.Fatalf("second fetch: %v, want [later]", ids(second))
	}
	if got.Before(runAt) {
		t.Fatalf("delayed message fetched at %v, before its run-at %v", got, runAt)
	}
	if late := got.Sub(runAt); late > 300*time.Millisecond {
		t.Fatalf("delayed message fetched %v late", late)
	}
	if err := c.Ack(ctx, append(first, second...)...); err != nil {
		t.Fatal(err)
	}
	expectEmpty(t, c, 300*time.Millisecond)
	if ks := redistest.Keys(t, e.c, e.prefix); len(ks) != 0 {
		t.Fatalf("keys left: %v", ks)
	}
}

func TestFetchTakesAtMostMax(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var msgs []*broker.Message
	for _, id := range seq("m", 10) {
		msgs = append(msgs, msg("q", id))
	}
	e.enqueue(msgs...)
	c := e.open("q", time.Minute)
	if ds := fetch(t, c, 4); !slices.Equal(ids(ds), seq("m", 4)) {
		t.Fatalf("fetch 4: %v", ids(ds))
	}
	if _, err := c.Fetch(context.Background(), 0); err == nil {
		t.Fatal("fetch 0: no error")
	}
}

// countingHook counts the commands a client sends, and when, leaving out
// those go-redis sends to set up a connection.
type countingHook struct {
	n  atomic.Int64
	mu sync.Mutex
	at []time.Time
}

// sent returns the times of the commands sent from since on.
func (h *countingHook) sent(since time.Time) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []time.Time
	for _, at := range h.at {
		if !at.Before(since) {
			out = append(out, at)
		}
	}
	return out
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
		default:
			h.n.Add(1)
			h.mu.Lock()
			h.at = append(h.at, time.Now())
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next // go-redis sets connections up with a pipeline; the driver does not pipeline when idle
}

func TestIdleFetchDoesNotPoll(t *testing.T) {
	t.Parallel()
	rc := redistest.NewClient(t)
	hook := &countingHook{}
	rc.AddHook(hook)
	e := newEnvOn(t, rc, nil)
	c := e.open("q", time.Minute)
	const idle = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), idle)
	defer cancel()
	if _, err := c.Fetch(ctx, 10); err != context.DeadlineExceeded {
		t.Fatalf("fetch on an empty queue: %v", err)
	}
	// About one fetch.lua and one BZPOPMIN a second, plus one more pair when
	// a wait ends just before the deadline.
	if n := hook.n.Load(); n > 2*3+3 {
		t.Fatalf("an idle Fetch sent %d commands in %v", n, idle)
	}
}

// TestKeptIdleFetchSleeps: a kept consumer (a worker pool's) looks once and
// then sleeps on the wake signal until its context ends: three or four
// commands in 3s, where one that looks for expired leases itself sends
// about six.
func TestKeptIdleFetchSleeps(t *testing.T) {
	t.Parallel()
	rc := redistest.NewClient(t)
	hook := &countingHook{}
	rc.AddHook(hook)
	e := newEnvOn(t, rc, nil)
	c, err := e.d.Open(context.Background(), "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute, Kept: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	start := time.Now() // after Open's SADD to the queue registry
	deadline := start.Add(3 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := c.Fetch(ctx, 10); err != context.DeadlineExceeded {
		t.Fatalf("fetch on an empty queue: %v", err)
	}
	// fetch.lua, then BZPOPMIN until the deadline: two, as the client's
	// helper takes whole seconds (2s, then the 0.99s left). A loaded
	// server may end a wait a little early, and each moment left costs one
	// more short wait: those come in the last 200ms, so they are left out
	// (a Fetch that polled every 500ms would send 6 before them).
	var early []time.Duration
	for _, at := range hook.sent(start) {
		if at.Before(deadline.Add(-200 * time.Millisecond)) {
			early = append(early, at.Sub(start).Round(time.Millisecond))
		}
	}
	if len(early) > 3 {
		t.Fatalf("an idle kept Fetch sent %d commands in its first 2.8s (at %v), want at most 3", len(early), early)
	}
}
