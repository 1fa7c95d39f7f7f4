package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The subscriber processes of these tests are this test binary run again:
// by proctest.Start, or by the demo's own execSelf. Either way the child
// runs subscriberProcess, as `go run ./examples/fanout` does.
var children = proctest.New(childEnv)

func init() { children.Funcs[childName] = subscriberProcess }

func TestMain(m *testing.M) { children.Main(m) }

// testURL is the URL of the test Redis, for the subscriber processes.
func testURL(t *testing.T) string {
	t.Helper()
	redistest.Client(t) // fails the test with advice when Redis is down
	opts, target, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	if opts.IsClusterMode || len(opts.Addrs) != 1 {
		t.Fatalf("the fan-out tests need one Redis server, not %s", target)
	}
	return urlOf(&redis.Options{Addr: opts.Addrs[0], DB: opts.DB, Username: opts.Username, Password: opts.Password})
}

// startSubscribers starts subscriber processes named from, from+1, ... and
// waits until each has its subscription confirmed.
func startSubscribers(t *testing.T, ctx context.Context, rdb redis.UniversalClient, cfg config, from, n int) []*proctest.Child {
	t.Helper()
	var procs []*proctest.Child
	for i := from; i < from+n; i++ {
		procs = append(procs, children.Start(t, childName, childEnvFor(cfg, strconv.Itoa(i))...))
	}
	ready, err := awaitReady(ctx, rdb, rendezvous(cfg.Prefix), n)
	if err != nil {
		t.Fatalf("subscribers %d to %d: %v (ready: %v)", from, from+n-1, err, ready)
	}
	return procs
}

// waitExited waits for each process to exit by itself with status 0.
func waitExited(t *testing.T, procs []*proctest.Child) {
	t.Helper()
	for _, p := range procs {
		select {
		case <-p.Done():
			if err := p.Err(); err != nil {
				t.Errorf("subscriber process %d: %v", p.Cmd.Process.Pid, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("subscriber process %d still runs 20s after the end marker", p.Cmd.Process.Pid)
		}
	}
}

func testClient(t *testing.T, rdb redis.UniversalClient, prefix string) *conveyor.Client {
	t.Helper()
	d, err := pubsub.New(rdb, &pubsub.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The acceptance test: three worker processes each receive all
// 1,000 messages published while they are subscribed.
func TestThreeProcessesReceiveEveryMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	cfg := config{RedisURL: testURL(t), Prefix: redistest.Prefix(t)}
	procs := startSubscribers(t, ctx, rdb, cfg, 1, 3)
	channel := keys.Channel(cfg.Prefix, queue)
	if n, err := subscribersOf(ctx, rdb, channel); err != nil || n != 3 {
		t.Fatalf("PUBSUB NUMSUB %s = %d, %v; want 3 once every subscriber said it is ready", channel, n, err)
	}

	client := testClient(t, rdb, cfg.Prefix)
	if err := publish(ctx, client, 0, 1000); err != nil {
		t.Fatal(err)
	}
	if err := publishEnd(ctx, client); err != nil {
		t.Fatal(err)
	}
	tallies, err := collectTallies(ctx, rdb, rendezvous(cfg.Prefix), 3)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{}
	for _, p := range procs {
		pids[p.Cmd.Process.Pid] = true
	}
	for _, tl := range tallies {
		if !tl.exactly(0, 1000) {
			t.Errorf("%v; want #0 to #999 once each, in order", tl)
		}
		if !pids[tl.PID] {
			t.Errorf("tally from pid %d, not one of the subscriber processes %v", tl.PID, pids)
		}
		delete(pids, tl.PID)
	}
	waitExited(t, procs)
}

// What "while they are subscribed" means: a subscriber that joins half-way
// receives the second half and nothing of the first, and the two that were
// there all along receive both halves.
func TestLateSubscriberMissesWhatCameBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	cfg := config{RedisURL: testURL(t), Prefix: redistest.Prefix(t)}
	client := testClient(t, rdb, cfg.Prefix)

	procs := startSubscribers(t, ctx, rdb, cfg, 1, 2)
	if err := publish(ctx, client, 0, 500); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, startSubscribers(t, ctx, rdb, cfg, 3, 1)...)
	if err := publish(ctx, client, 500, 1000); err != nil {
		t.Fatal(err)
	}
	if err := publishEnd(ctx, client); err != nil {
		t.Fatal(err)
	}
	tallies, err := collectTallies(ctx, rdb, rendezvous(cfg.Prefix), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tallies {
		from := 0
		if tl.Name == "3" {
			from = 500
		}
		if !tl.exactly(from, 1000) {
			t.Errorf("%v; want #%d to #999 once each, in order", tl, from)
		}
	}
	waitExited(t, procs)
}

// checkDemo runs the whole demo, subscriber processes started by its own
// execSelf, and checks what it prints.
func checkDemo(t *testing.T, rdb redis.UniversalClient, cfg config) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := run(ctx, rdb, &out, cfg); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"starting 3 subscriber processes for queue \"prices\"",
		"subscriber 1 (pid ", "subscriber 2 (pid ", "subscriber 3 (pid ",
		":{prices}:ch: 3\n",
		"published 1000 price updates (#0 to #999), then an end marker\n",
		"all 3 subscriber processes have exited\n",
		"published 100 more price updates with 0 subscribers: Redis accepted them, nobody received them, nothing stored them\n",
		"the same 100 updates on the list driver: 100 ready in Redis",
		"every subscriber received every message published while it was subscribed\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "received 1000 price updates, #0 to #999, in order, none twice\n"); n != 3 {
		t.Errorf("%d subscribers received every update, want 3:\n%s", n, got)
	}
}

func TestDemoOnRealRedis(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	checkDemo(t, rdb, config{RedisURL: testURL(t), Prefix: prefix})
	if keys := redistest.AllKeys(t, rdb, prefix); len(keys) != 0 {
		t.Fatalf("demo left keys behind: %v", keys)
	}
}

// On the embedded Redis `go run` falls back to: the subscriber processes
// reach it over loopback.
func TestDemoOnEmbeddedRedis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	checkDemo(t, rdb, config{RedisURL: urlOf(rdb.Options())})
	if keys := mr.Keys(); len(keys) != 0 {
		t.Fatalf("demo left keys behind: %v", keys)
	}
}

// The tally the tests rely on catches each way a broadcast can go wrong.
func TestTallyCatchesGapsDuplicatesAndDisorder(t *testing.T) {
	t.Parallel()
	feed := func(seqs ...int) *tally {
		tl := newTally("x")
		for _, s := range seqs {
			tl.add(&broker.Delivery{Message: broker.Message{Kind: kindUpdate, Payload: []byte(`{"seq":` + strconv.Itoa(s) + `}`)}})
		}
		tl.add(&broker.Delivery{Message: broker.Message{Kind: kindEnd}})
		return tl
	}
	if tl := feed(0, 1, 2, 3); !tl.exactly(0, 4) || tl.exactly(0, 5) || tl.exactly(1, 4) {
		t.Errorf("complete run judged wrongly: %v", tl)
	}
	for name, tl := range map[string]*tally{
		"gap":         feed(0, 1, 3),
		"duplicate":   feed(0, 1, 1, 2),
		"disorder":    feed(0, 2, 1, 3),
		"late start":  feed(1, 2, 3),
		"early end":   feed(0, 1, 2),
		"no end mark": func() *tally { tl := feed(0, 1, 2, 3); tl.Ended = false; return tl }(),
	} {
		if tl.exactly(0, 4) {
			t.Errorf("%s: judged complete: %v", name, tl)
		}
	}
	bad := newTally("x")
	bad.add(&broker.Delivery{Message: broker.Message{Kind: kindUpdate, Payload: []byte("not json")}})
	if bad.Undecodable != 1 || bad.Received != 0 {
		t.Errorf("undecodable payload: %+v", bad)
	}
}

// awaitNoSubscribers waits for Redis to drop a subscriber that has gone
// (the demo asks right after its subscriber processes exit, before Redis
// may have seen their connections close), and fails at its deadline while
// one is still there.
func TestAwaitNoSubscribers(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	channel := redistest.Prefix(t) + ":ch"
	sub := rdb.Subscribe(ctx, channel)
	if _, err := sub.Receive(ctx); err != nil { // the subscription is confirmed
		t.Fatal(err)
	}
	if n, err := awaitNoSubscribers(ctx, rdb, channel, 100*time.Millisecond); err == nil || n != 1 {
		t.Fatalf("with a subscriber on: %d, %v; want 1 and an error at the deadline", n, err)
	}
	done := make(chan error, 1)
	var n int64
	go func() {
		var err error
		n, err = awaitNoSubscribers(ctx, rdb, channel, 20*time.Second)
		done <- err
	}()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || n != 0 {
		t.Fatalf("after the subscriber left: %d, %v; want 0", n, err)
	}
}
