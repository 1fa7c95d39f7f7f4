package elect_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/elect"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// field is a set of candidates of one election and what they did.
type field struct {
	t      *testing.T
	cfg    elect.Config
	mu     sync.Mutex
	leads  []string     // candidate IDs in the order they started leading
	active atomic.Int32 // leads running now
	most   atomic.Int32 // the most that ran at once
	led    chan string  // each start of a lead
	stops  []func()     // per candidate: end its campaign and wait for Run
}

func newField(t *testing.T) *field {
	p := redistest.Prefix(t)
	return &field{
		t:   t,
		cfg: elect.Config{Lease: p + ":{q}:keeper", Heir: p + ":{q}:heir"},
		led: make(chan string, 100),
	}
}

// start starts candidate id on rdb and returns its stop.
func (f *field) start(rdb redis.UniversalClient, id string) func() {
	f.t.Helper()
	e, err := elect.New(rdb, id, f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx, func(ctx context.Context) {
			n := f.active.Add(1)
			for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
			}
			f.mu.Lock()
			f.leads = append(f.leads, id)
			f.mu.Unlock()
			f.led <- id
			<-ctx.Done()
			f.active.Add(-1)
		})
	}()
	stop := func() {
		cancel()
		<-done
	}
	f.t.Cleanup(stop)
	return stop
}

// next waits (at most 5s) for a candidate to start leading.
func (f *field) next() (string, time.Time) {
	f.t.Helper()
	select {
	case id := <-f.led:
		return id, time.Now()
	case <-time.After(5 * time.Second):
		f.t.Fatal("no candidate started leading within 5s")
	}
	return "", time.Time{}
}

func TestOneLeaderThenTheHeirOnResign(t *testing.T) {
	t.Parallel()
	f := newField(t)
	c := redistest.Client(t)
	stops := map[string]func(){}
	for i := range 5 {
		id := fmt.Sprintf("c%d", i)
		stops[id] = f.start(c, id)
	}
	first, _ := f.next()
	// The first leader resigns: another leads at its heir's next poll.
	stopped := time.Now()
	stops[first]()
	second, at := f.next()
	if second == first {
		t.Fatalf("%s led again after it stopped", first)
	}
	if d := at.Sub(stopped); d > time.Second {
		t.Errorf("the next leader started %v after the first resigned; want within a second (one poll of the heir)", d)
	}
	if m := f.most.Load(); m != 1 {
		t.Errorf("%d candidates led at once; want 1", m)
	}
	select {
	case id := <-f.led:
		t.Errorf("%s started leading too", id)
	default:
	}
}

// TestTakeoverAfterDeath cuts the leader off Redis without letting it
// resign (its connection stalls, as a dead process's does): the heir takes
// over when the lease runs out, within TTL + Renew of the last renewal.
func TestTakeoverAfterDeath(t *testing.T) {
	t.Parallel()
	if redistest.IsCluster() {
		t.Skip("the proxy forwards to one server; the election is the same on a cluster")
	}
	f := newField(t)
	opts, _, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	proxy := redistest.StartProxy(t, opts.Addrs[0])
	o := *opts
	o.Addrs = []string{proxy.Addr}
	doomed := redis.NewUniversalClient(&o)
	t.Cleanup(func() { _ = doomed.Close() })
	f.start(doomed, "doomed")
	if id, _ := f.next(); id != "doomed" {
		t.Fatalf("%s led first; want doomed (the only candidate)", id)
	}
	for i := range 3 {
		f.start(redistest.Client(t), fmt.Sprintf("c%d", i))
	}
	// Wait until one of the others holds the heir's seat, so that the
	// takeover below is the heir's and not a standby's.
	c := redistest.Client(t)
	redistest.Eventually(t, "an heir", func() bool {
		h, _ := c.Get(context.Background(), f.cfg.Heir).Result()
		return h != ""
	})
	proxy.Pause()
	t.Cleanup(proxy.Resume)
	died := time.Now()
	id, at := f.next()
	if id == "doomed" {
		t.Fatal("the stalled leader led again")
	}
	took := at.Sub(died)
	t.Logf("%s took over %v after the leader stalled", id, took)
	if limit := elect.DefaultTTL + 2*elect.DefaultRenew; took > limit {
		t.Errorf("takeover after %v; want within TTL + 2 Renew = %v", took, limit)
	}
}

// TestRenewNeverTakesAnothersLease: a leader whose lease passed to another
// steps down and leaves the other's lease as it was.
func TestRenewNeverTakesAnothersLease(t *testing.T) {
	t.Parallel()
	f := newField(t)
	c := redistest.Client(t)
	ctx := context.Background()
	f.start(c, "a")
	f.next()
	// Another candidate's lease replaces a's (as when a's ran out).
	if err := c.Set(ctx, f.cfg.Lease, "b", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "a to stop leading once its lease passed to b", func() bool { return f.active.Load() == 0 })
	if v, err := c.Get(ctx, f.cfg.Lease).Result(); err != nil || v != "b" {
		t.Fatalf("lease holds %q, %v; want b's, untouched", v, err)
	}
	// a's renewal left b's ID; it set the key's TTL to a's, which b's own
	// next renewal sets again.
	if ttl := c.PTTL(ctx, f.cfg.Lease).Val(); ttl <= 0 {
		t.Errorf("b's lease has TTL %v; want one", ttl)
	}
}

// TestLeaderKeepsItsLeaseOnAFullRedis: on a Redis at its maxmemory with
// noeviction, which refuses every write that may take memory, the leader
// goes on renewing its lease (GETEX is allowed) and keeps leading: a
// queue's keeper must go on promoting timers and handing back expired
// leases while Redis is full.
func TestLeaderKeepsItsLeaseOnAFullRedis(t *testing.T) {
	t.Parallel()
	f := newField(t)
	c := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	f.start(c, "a")
	f.next()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "probe", "x", 0).Err(); err == nil {
		t.Fatal("SET on a full Redis succeeded; want an OOM error")
	}
	// Renewals seen: the lease's TTL going up. Five of them outlast the
	// lease's own TTL (750 ms) several times over.
	renewals, last := 0, c.PTTL(ctx, f.cfg.Lease).Val()
	redistest.Eventually(t, "five renewals of the leader's lease on a full Redis", func() bool {
		ttl := c.PTTL(ctx, f.cfg.Lease).Val()
		if ttl > last {
			renewals++
		}
		last = ttl
		return renewals >= 5
	})
	if f.active.Load() != 1 {
		t.Fatalf("%d leading; want a, still", f.active.Load())
	}
	if v, err := c.Get(ctx, f.cfg.Lease).Result(); err != nil || v != "a" {
		t.Fatalf("lease holds %q, %v; want a's", v, err)
	}
}
