package conveyor_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

func newClient(t *testing.T, cfg *conveyor.ClientConfig) (*conveyor.Client, broker.Driver, string, redis.UniversalClient) {
	t.Helper()
	rdb := redistest.NewClient(t)
	prefix := redistest.Prefix(t)
	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	c, err := conveyor.NewClient(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, d, prefix, rdb
}

func TestEnqueueManyIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	c, _, prefix, rdb := newClient(t, nil)
	ctx := context.Background()
	// Load the scripts first so the count sees the steady state.
	if _, err := c.EnqueueMany(ctx, conveyor.Request{Kind: "warm"}, conveyor.Request{Kind: "warm", Opts: &conveyor.EnqueueOptions{Queue: "other"}}); err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	rdb.AddHook(rt)
	reqs := make([]conveyor.Request, 300)
	for i := range reqs {
		q := []string{"a", "b", "c"}[i%3]
		reqs[i] = conveyor.Request{Kind: "k", Args: map[string]int{"i": i}, Opts: &conveyor.EnqueueOptions{Queue: q}}
	}
	msgs, err := c.EnqueueMany(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.n.Load(); got != 1 {
		t.Fatalf("EnqueueMany of 300 jobs over 3 queues took %d round trips, want 1", got)
	}
	if len(msgs) != 300 || msgs[0].ID == "" || string(msgs[5].Payload) != `{"i":5}` {
		t.Fatalf("returned messages wrong: %d, %+v", len(msgs), msgs[5])
	}
	if len(redistest.Keys(t, rdb, prefix)) == 0 {
		t.Fatal("nothing stored")
	}
}

func TestEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	c, _, prefix, rdb := newClient(t, &conveyor.ClientConfig{MaxPayloadBytes: 1000})
	ctx := context.Background()
	big := make([]byte, 1001)
	_, err := c.Enqueue(ctx, "k", big, nil)
	var tooLarge *conveyor.PayloadTooLargeError
	if !errors.As(err, &tooLarge) || !errors.Is(err, conveyor.ErrPayloadTooLarge) || tooLarge.Size != 1001 || tooLarge.Limit != 1000 {
		t.Fatalf("oversized payload: %v", err)
	}
	for _, q := range []string{"a{b", "a}b", "a\nb", "a\x00b", strings.Repeat("q", 129), "\xff"} {
		_, err := c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{Queue: q})
		var qe *broker.QueueNameError
		if !errors.As(err, &qe) || !errors.Is(err, conveyor.ErrInvalidQueue) {
			t.Fatalf("queue %q: err = %v, want *QueueNameError", q, err)
		}
	}
	for name, o := range map[string]*conveyor.EnqueueOptions{
		"negative delay": {Delay: -time.Second},
		"year 9999":      {RunAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
		"brace in ID":    {ID: "order:{1}"},
		"long ID":        {ID: strings.Repeat("i", 129)},
		"timer, brace":   {ID: "order:{1}:timeout", Delay: time.Minute},
		"timer, long ID": {ID: strings.Repeat("i", 129), Delay: time.Minute},
	} {
		if _, err := c.Enqueue(ctx, "k", nil, o); !errors.Is(err, conveyor.ErrInvalidMessage) {
			t.Fatalf("%s: err = %v, want ErrInvalidMessage", name, err)
		}
	}
	// A batch with one bad request stores nothing.
	_, err = c.EnqueueMany(ctx, conveyor.Request{Kind: "ok"}, conveyor.Request{Kind: ""})
	if !errors.Is(err, conveyor.ErrInvalidMessage) {
		t.Fatalf("empty kind in batch: %v", err)
	}
	if ks := redistest.Keys(t, rdb, prefix); len(ks) != 0 {
		t.Fatalf("bad input stored keys: %v", ks)
	}
	if _, err := c.Enqueue(ctx, "k", func() {}, nil); err == nil {
		t.Fatal("args that cannot be JSON-encoded were accepted")
	}
}

// TestConcurrentEnqueueStoresEverything: calls that share round trips each
// get their own outcome and every job is stored once.
func TestConcurrentEnqueueStoresEverything(t *testing.T) {
	t.Parallel()
	c, d, _, _ := newClient(t, &conveyor.ClientConfig{MaxRoundTrips: 2})
	ctx := context.Background()
	const goroutines, each = 50, 200
	var wg sync.WaitGroup
	ids := make(chan string, goroutines*each)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				m, err := c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{Queue: "many"})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- m.ID
			}
		}()
	}
	wg.Wait()
	close(ids)
	want := map[string]bool{}
	for id := range ids {
		want[id] = true
	}
	cons, err := d.Open(ctx, "many", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	got := 0
	for got < goroutines*each {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ds, err := cons.Fetch(fctx, 500)
		cancel()
		if err != nil {
			t.Fatalf("fetched %d of %d: %v", got, goroutines*each, err)
		}
		for _, dl := range ds {
			if !want[dl.ID] {
				t.Fatalf("unexpected or duplicate job %s", dl.ID)
			}
			delete(want, dl.ID)
		}
		got += len(ds)
		if err := cons.Ack(ctx, ds...); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEnqueueMiddlewareOrder(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) conveyor.EnqueueMiddleware {
		return func(next conveyor.EnqueueFunc) conveyor.EnqueueFunc {
			return func(ctx context.Context, msgs []*broker.Message) error {
				order = append(order, name)
				for _, m := range msgs {
					if m.Headers == nil {
						m.Headers = map[string]string{}
					}
					m.Headers["via"] += name
				}
				return next(ctx, msgs)
			}
		}
	}
	c, _, _, _ := newClient(t, &conveyor.ClientConfig{Middleware: []conveyor.EnqueueMiddleware{mw("a"), mw("b")}})
	m, err := c.Enqueue(context.Background(), "k", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, "") != "ab" || m.Headers["via"] != "ab" {
		t.Fatalf("order %v, header %q; want a then b", order, m.Headers["via"])
	}
}

func TestEnqueueRedisDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	d, err := list.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := conveyor.NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(context.Background(), "k", nil, nil); err == nil {
		t.Fatal("Enqueue with Redis down returned nil")
	}
}

func TestChainOrder(t *testing.T) {
	t.Parallel()
	var got []string
	mw := func(name string) conveyor.Middleware {
		return func(next conveyor.Handler) conveyor.Handler {
			return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				got = append(got, name)
				return next.ProcessJob(ctx, job)
			})
		}
	}
	h := conveyor.Chain(mw("a"), mw("b"))(conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		got = append(got, "h")
		return nil
	}))
	if err := h.ProcessJob(context.Background(), conveyor.NewJob(&broker.Delivery{}, nil)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b,h" {
		t.Fatalf("order %v, want a,b,h", got)
	}
}
