package list_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/limits"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// countingConn counts the bytes a client writes to Redis.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// countingClient returns a client of the test Redis whose connections count
// the bytes they send into sent.
func countingClient(t *testing.T) (redis.UniversalClient, *atomic.Int64) {
	t.Helper()
	redistest.Client(t)
	opts, _, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	sent := new(atomic.Int64)
	var d net.Dialer
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, n: sent}, nil
	}
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c, sent
}

// TestSettleBytesDoNotGrowWithThePayload: an extend (each heartbeat), an
// ack and a release of a 512 KiB job send a short receipt, not the job.
func TestSettleBytesDoNotGrowWithThePayload(t *testing.T) {
	t.Parallel()
	c, sent := countingClient(t)
	e := newEnvOn(t, c, nil)
	ctx := context.Background()
	const limit = 1 << 10 // bytes one settle may send, keys and script SHA included
	big := func(id string) *broker.Message {
		m := msg("q", id)
		m.Payload = make([]byte, 512<<10)
		return m
	}
	e.enqueue(big("a"), big("b"))
	cons := e.open("q", time.Minute)
	ds := fetchN(t, cons, 2)
	// Each script is sent once by SHA first; load them with a first call.
	if err := cons.Extend(ctx, time.Minute, ds[0]); err != nil {
		t.Fatal(err)
	}
	if err := cons.Release(ctx, ds[1]); err != nil {
		t.Fatal(err)
	}
	ds = append(ds[:1], fetch(t, cons, 1)...)
	if err := cons.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name   string
		settle func() error
	}{
		{"extend", func() error { return cons.Extend(ctx, time.Minute, ds[1]) }},
		{"release", func() error { return cons.Release(ctx, ds[1]) }},
		{"ack", func() error { ds[1] = fetch(t, cons, 1)[0]; sent.Store(0); return cons.Ack(ctx, ds[1]) }},
	} {
		sent.Store(0)
		if err := step.settle(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if n := sent.Load(); n > limit {
			t.Errorf("%s of a 512 KiB job sent %d bytes, want at most %d", step.name, n, limit)
		}
	}
}

// snapshot returns a function that puts every key under prefix back as it
// is now and deletes the keys made since: what a failover to a replica that
// never saw the writes in between leaves.
func snapshot(t *testing.T, c redis.UniversalClient, prefix string) (restore func()) {
	t.Helper()
	ctx := context.Background()
	dumps := map[string]string{}
	for _, k := range redistest.AllKeys(t, c, prefix) {
		v, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		dumps[k] = v
	}
	return func() {
		t.Helper()
		for _, k := range redistest.AllKeys(t, c, prefix) {
			if _, ok := dumps[k]; !ok {
				if err := c.Del(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k, v := range dumps {
			if err := c.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFencingSurvivesAForgottenFetch: a failover loses a fetch's write
// (the job is ready again, unleased) and another consumer fetches the job;
// the first consumer's settles are refused, the second's land.
func TestFencingSurvivesAForgottenFetch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.enqueue(msg("q", "a"))
	first, second := e.open("q", time.Minute), e.open("q", time.Minute)
	restore := snapshot(t, e.c, e.prefix)
	old := fetch(t, first, 1)[0]
	restore()
	cur := fetch(t, second, 1)[0]
	if cur.ID != "a" {
		t.Fatalf("second fetch got %s, want a", cur.ID)
	}
	if old.Receipt == cur.Receipt || old.Token == cur.Token {
		t.Errorf("two fetches of one job share receipt %q / token %q", cur.Receipt, cur.Token)
	}
	for op, err := range map[string]error{
		"extend":  first.Extend(ctx, time.Minute, old),
		"ack":     first.Ack(ctx, old),
		"release": first.Release(ctx, old),
		"retry":   first.Retry(ctx, old, time.Time{}),
		"discard": first.Discard(ctx, old, "x"),
	} {
		if !errors.Is(err, broker.ErrLeaseLost) {
			t.Errorf("%s by the consumer whose fetch was forgotten: %v, want ErrLeaseLost", op, err)
		}
	}
	if err := second.Ack(ctx, cur); err != nil {
		t.Fatalf("ack by the current holder: %v", err)
	}
	if ks := redistest.Keys(t, e.c, e.prefix); len(ks) != 0 {
		t.Fatalf("keys left: %v", ks)
	}
}

// TestLostFetchReplyIsHandedBack: a fetch whose reply is lost after Redis
// ran it leaves nothing leased to nobody: its batch goes back to the front
// of ready, in order, with no recovery counted, so losing it MaxRecoveries
// times does not discard a healthy job as poison.
func TestLostFetchReplyIsHandedBack(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	direct := srv.Client(t)
	d, err := list.New(rdb, &list.Config{Prefix: "lossy", MaxRecoveries: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := d.Open(ctx, "q", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	// Warm up: scripts loaded, so the next fetch is one EVALSHA.
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "warm")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, fetch(t, c, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := d.Enqueue(ctx, []*broker.Message{msg("q", "a"), msg("q", "b")}); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		px.DropReplyTo(":dead_expired") // only fetch.lua's call names it
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ds, err := c.Fetch(fctx, 10)
		cancel()
		if err == nil {
			t.Fatalf("round %d: fetch with its reply lost returned %v", round, ids(ds))
		}
		ready, _ := direct.LRange(ctx, "lossy:{q}:ready", 0, -1).Result()
		leased, _ := direct.ZCard(ctx, "lossy:{q}:lease").Result()
		if len(ready) != 2 || leased != 0 {
			t.Fatalf("round %d: after a lost fetch reply (%v) %d ready, %d leased; want 2 ready, 0 leased", round, err, len(ready), leased)
		}
	}
	ds := fetchN(t, c, 2)
	if got := ids(ds); !slices.Equal(got, []string{"a", "b"}) || ds[0].Recoveries != 0 || ds[1].Recoveries != 0 {
		t.Fatalf("after 3 lost fetches got %v with recoveries %d, %d; want [a b], none", got, ds[0].Recoveries, ds[1].Recoveries)
	}
	if n, _ := direct.LLen(ctx, "lossy:{q}:dead").Result(); n != 0 {
		t.Fatalf("%d discarded", n)
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatal(err)
	}
}

// TestBigBatchSettlesInChunks: Ack, Extend and Release of 1,200 deliveries
// take three script calls each (at most 512 receipts per call, so one call
// stays short), and each still reports exactly the deliveries whose lease
// was lost, whichever call they were in.
func TestBigBatchSettlesInChunks(t *testing.T) {
	t.Parallel()
	const n = 1200
	c := redistest.NewClient(t)
	log := new(drivertest.CmdLog)
	c.AddHook(log)
	e := newEnvOn(t, c, nil)
	ctx := context.Background()
	var msgs []*broker.Message
	for _, id := range seq("m", n) {
		msgs = append(msgs, msg("q", id))
	}
	e.enqueue(msgs...)
	cons := e.open("q", time.Minute)
	ds := fetchN(t, cons, n)
	for _, i := range []int{5, 600, 1100} { // one in each call of 512
		e.dropLease("q", ds[i])
	}
	check := func(op string, err error, calls int, lost ...int) {
		t.Helper()
		var want, named []*broker.Delivery
		for _, i := range lost {
			want = append(want, ds[i])
		}
		var me *multierror.Error
		if !errors.As(err, &me) {
			t.Fatalf("%s: %v, want the lost ones", op, err)
		}
		for _, x := range me.Errors {
			var de *broker.DeliveryError
			if !errors.As(x, &de) || !errors.Is(x, broker.ErrLeaseLost) {
				t.Fatalf("%s: %v is no lost lease", op, x)
			}
			named = append(named, de.Delivery)
		}
		if !slices.Equal(named, want) {
			t.Fatalf("%s reported %v lost, want %v", op, ids(named), ids(want))
		}
		if n := log.Count("evalsha"); n != calls {
			t.Fatalf("%s took %d script calls, want %d", op, n, calls)
		}
		log.Take()
	}
	log.Take()
	check("extend", cons.Extend(ctx, time.Minute, ds...), 3, 5, 600, 1100)
	check("release", cons.Release(ctx, ds[:700]...), 2, 5, 600)
	check("ack", cons.Ack(ctx, ds[700:]...), 1, 1100)
	var want []string
	for i, d := range ds[:700] {
		if i != 5 && i != 600 {
			want = append(want, d.ID)
		}
	}
	if got := ids(fetchN(t, cons, len(want))); !slices.Equal(got, want) {
		t.Fatalf("released deliveries came back as %v..., want %v...", got[:10], want[:10])
	}
}

// TestFailedFetchScriptLosesNothing: Redis keeps what a script wrote
// before it failed, RPOP included, so fetch.lua pushes the messages it
// popped and did not store again back to the front of ready before it
// raises a failure (here a limit key of the wrong type): the fetch returns
// the error, and the next one gets the job with no recovery counted. (A
// failure after the batch was leased is handed back by the consumer, as
// after a lost reply.) Before, the popped job was gone.
func TestFailedFetchScriptLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "fetch-script-fails"
	ctx := context.Background()
	if err := e.d.SetLimit(ctx, q, "k", 5); err != nil {
		t.Fatal(err)
	}
	c := e.open(q, time.Minute)
	m := msg(q, "a")
	m.Kind = "k"
	e.enqueue(m)
	state := limits.QueueKeys(e.prefix, q).State
	e.breakKey(state)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ds, err := c.Fetch(fctx, 10)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Fetch with a broken limit key = %v, %v; want fetch.lua's WRONGTYPE", ds, err)
	}
	e.mendKey(state)
	d := fetch(t, c, 10)
	if len(d) != 1 || d[0].ID != "a" || d[0].Recoveries != 0 {
		t.Fatalf("after fetch.lua failed, delivered %v, want [a] with no recovery counted", d)
	}
	if err := c.Ack(ctx, d...); err != nil {
		t.Fatal(err)
	}
}

// TestFailedRetryKeepsTheLease: Redis keeps what a script wrote before it
// failed, so retry.lua, which takes the lease and its message away before
// it stores the message again, puts both back when a later command fails
// (here a limit key of the wrong type): the Retry returns the error, and
// the job, still leased, is not lost. Before, it was gone.
func TestFailedRetryKeepsTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "retry-fails"
	ctx := context.Background()
	if err := e.d.SetLimit(ctx, q, "k", 5); err != nil {
		t.Fatal(err)
	}
	c := e.open(q, time.Minute)
	m := msg(q, "a")
	m.Kind = "k"
	d := e.leaseOne(c, m)
	of := limits.QueueKeys(e.prefix, q).Of
	e.breakKey(of)
	for _, at := range []time.Time{{}, time.Now().Add(time.Hour)} {
		err := c.Retry(ctx, d, at)
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Retry (at %v) with a broken limit key = %v, want retry.lua's WRONGTYPE", at, err)
		}
		e.wantLeased(q, 1, "after the failed Retry")
	}
	e.mendKey(of)
	if err := c.Retry(ctx, d, time.Time{}); err != nil {
		t.Fatalf("Retry after the key was mended: %v", err)
	}
	again := fetch(t, c, 10)
	if len(again) != 1 || again[0].ID != "a" || again[0].Retries != 1 {
		t.Fatalf("after the retry, delivered %v, want [a] with one retry", again)
	}
	if err := c.Ack(ctx, again...); err != nil {
		t.Fatal(err)
	}
}

// TestFailedReleaseKeepsTheLease: a Release that meets a key of another
// type (written by hand) among those release.lua reads fails before it
// takes the lease: the job stays leased, not lost between the lease and
// ready. Before, the canceled and reclaimed keys were read after the take.
func TestFailedReleaseKeepsTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "release-fails"
	ctx := context.Background()
	c := e.open(q, time.Minute)
	d := e.leaseOne(c, msg(q, "a"))
	for _, part := range []string{"canceled", "reclaimed"} {
		k := e.key(q, part)
		e.breakKey(k)
		// A receipt that is not leased takes release.lua's slow path,
		// which reads the record of reclaimed leases.
		gone := *d
		gone.Receipt = "x" + gone.Receipt
		err := c.Release(ctx, d, &gone)
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Release with the %s key broken = %v, want release.lua's WRONGTYPE", part, err)
		}
		e.wantLeased(q, 1, "after the failed Release ("+part+" broken)")
		e.mendKey(k)
	}
	if err := c.Release(ctx, d); err != nil {
		t.Fatalf("Release after the keys were mended: %v", err)
	}
	again := fetch(t, c, 10)
	if len(again) != 1 || again[0].ID != "a" {
		t.Fatalf("after the release, delivered %v, want [a]", again)
	}
	if err := c.Ack(ctx, again...); err != nil {
		t.Fatal(err)
	}
}

// TestFailedReclaimKeepsTheLeases: a fetch whose reclaim of expired leases
// meets a key of another type (written by hand: the record of reclaimed
// leases, or the discard list a poison job goes to) fails with the leases
// still in place, not with their messages in neither the lease nor ready;
// once the key is mended the next fetch recovers the job.
func TestFailedReclaimKeepsTheLeases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		part   string
		maxRec int // MaxRecoveries: 1 makes the reclaimed job poison
	}{{"reclaimed", 0}, {"dead", 1}} {
		t.Run(tc.part, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, &list.Config{MaxRecoveries: tc.maxRec})
			const q = "reclaim-fails"
			ctx := context.Background()
			c := e.open(q, time.Minute)
			e.leaseOne(c, msg(q, "a"))
			e.expireLeases(q)
			k := e.key(q, tc.part)
			e.breakKey(k)
			c2 := e.open(q, time.Minute)
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ds, err := c2.Fetch(fctx, 10)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("Fetch reclaiming with the %s key broken = %v, %v; want fetch.lua's WRONGTYPE", tc.part, ds, err)
			}
			e.wantLeased(q, 1, "after the failed reclaim ("+tc.part+" broken)")
			e.mendKey(k)
			if tc.maxRec == 1 {
				// Poison now: the next fetch discards it and delivers
				// nothing (it waits until its deadline).
				fctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				ds, err := c2.Fetch(fctx, 10)
				cancel()
				if len(ds) > 0 || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Fetch after the key was mended = %v, %v; want nothing delivered", ds, err)
				}
				if n, err := e.c.LLen(ctx, k).Result(); err != nil || n != 1 {
					t.Fatalf("discarded after the key was mended: %d (%v), want 1", n, err)
				}
				return
			}
			again := fetch(t, c2, 10)
			if len(again) != 1 || again[0].ID != "a" || again[0].Recoveries != 1 {
				t.Fatalf("after the key was mended, delivered %v, want [a] with one recovery", again)
			}
			if err := c2.Ack(ctx, again...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBrokenReadyKeyLosesNothing: with the ready key of another type
// (written by hand), the list scripts that move jobs into ready fail
// before they take anything: a grouped enqueue leaves no record of its job
// (the retry after the key is mended is stored, not refused as a
// duplicate), and a release, a retry and a reclaim leave the job leased.
func TestBrokenReadyKeyLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "ready-broken"
	ctx := context.Background()
	c := e.open(q, time.Minute)
	d := e.leaseOne(c, msg(q, "a"))
	ready := e.key(q, "ready")
	e.breakKey(ready)
	g := msg(q, "g")
	g.Group = "order-1"
	if err := e.d.Enqueue(ctx, []*broker.Message{g}); err == nil {
		t.Fatal("a grouped Enqueue onto a ready key of another type returned nil")
	}
	wantLeased := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("%s with ready broken = %v, want WRONGTYPE", what, err)
		}
		e.wantLeased(q, 1, "after the failed "+what)
	}
	wantLeased("Release", c.Release(ctx, d))
	wantLeased("Retry", c.Retry(ctx, d, time.Time{}))
	e.expireLeases(q)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := c.Fetch(fctx, 10)
	cancel()
	wantLeased("reclaim", err)
	e.mendKey(ready)
	e.enqueue(g)
	got := map[string]bool{}
	for len(got) < 2 {
		for _, x := range fetch(t, c, 10) {
			got[x.ID] = true
			if err := c.Ack(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !got["a"] || !got["g"] {
		t.Fatalf("after the key was mended, ran %v, want a and g", got)
	}
}

// TestRetryWithABrokenWakeKeyLands: a retry whose message is stored lands
// even when the wake signal cannot be set (its key of another type): it is
// reported as landed and the job is in ready once, not also put back on
// its lease (which would run it twice).
func TestRetryWithABrokenWakeKeyLands(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const q = "wake-broken"
	ctx := context.Background()
	c := e.open(q, time.Minute)
	d := e.leaseOne(c, msg(q, "a"))
	if err := e.c.Set(ctx, e.key(q, "wake"), "not a signal", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Retry(ctx, d, time.Time{}); err != nil {
		t.Fatalf("Retry with the wake key broken: %v", err)
	}
	if n, err := e.c.LLen(ctx, e.key(q, "ready")).Result(); err != nil || n != 1 {
		t.Fatalf("ready after the retry: %d (%v), want 1", n, err)
	}
	if n, err := e.c.ZCard(ctx, e.key(q, "lease")).Result(); err != nil || n != 0 {
		t.Fatalf("leases after the retry: %d (%v), want 0", n, err)
	}
}

// wantLeased fails the test unless queue holds n leases, each with its
// message in the inflight HASH; when says when that was asked.
func (e *env) wantLeased(queue string, n int64, when string) {
	e.t.Helper()
	ctx := context.Background()
	if got, err := e.c.ZCard(ctx, e.key(queue, "lease")).Result(); err != nil || got != n {
		e.t.Fatalf("leases %s: %d (%v), want %d", when, got, err, n)
	}
	if got, err := e.c.HLen(ctx, e.key(queue, "inflight")).Result(); err != nil || got != n {
		e.t.Fatalf("messages in flight %s: %d (%v), want %d", when, got, err, n)
	}
}

// leaseOne enqueues m and fetches it on c: the test fails unless the fetch
// delivers m alone.
func (e *env) leaseOne(c broker.Consumer, m *broker.Message) *broker.Delivery {
	e.t.Helper()
	e.enqueue(m)
	d := fetch(e.t, c, 10)
	if len(d) != 1 || d[0].ID != m.ID {
		e.t.Fatalf("fetched %v, want [%s]", d, m.ID)
	}
	return d[0]
}

// breakKey overwrites key with a string, as a hand-written value of another
// type would; mendKey deletes it again.
func (e *env) breakKey(key string) {
	e.t.Helper()
	if err := e.c.Set(context.Background(), key, "not what the driver stored", 0).Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) mendKey(key string) {
	e.t.Helper()
	if err := e.c.Del(context.Background(), key).Err(); err != nil {
		e.t.Fatal(err)
	}
}
