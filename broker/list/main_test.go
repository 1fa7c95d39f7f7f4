package list_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is one test's driver on its own key prefix.
type env struct {
	t      *testing.T
	c      redis.UniversalClient
	d      *list.Driver
	prefix string
}

func newEnv(t *testing.T, cfg *list.Config) *env {
	t.Helper()
	return newEnvOn(t, redistest.Client(t), cfg)
}

func newEnvOn(t *testing.T, c redis.UniversalClient, cfg *list.Config) *env {
	t.Helper()
	if cfg == nil {
		cfg = &list.Config{}
	}
	p := redistest.Prefix(t)
	cfg.Prefix = p
	d, err := list.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, c: c, d: d, prefix: p}
}

// key returns the key <prefix>:{queue}:part.
func (e *env) key(queue, part string) string { return keys.Queue(e.prefix, queue).Part(part) }

func (e *env) open(queue string, vt time.Duration) broker.Consumer {
	e.t.Helper()
	c, err := e.d.Open(context.Background(), queue, &broker.ConsumerOptions{VisibilityTimeout: vt})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			e.t.Errorf("close: %v", err)
		}
	})
	return c
}

func (e *env) enqueue(msgs ...*broker.Message) {
	e.t.Helper()
	if err := e.d.Enqueue(context.Background(), msgs); err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
}

// fetch fetches up to max deliveries, failing the test after 5s.
func fetch(t *testing.T, c broker.Consumer, max int) []*broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := c.Fetch(ctx, max)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return ds
}

// fetchN fetches until it holds n deliveries, failing after 5s.
func fetchN(t *testing.T, c broker.Consumer, n int) []*broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []*broker.Delivery
	for len(out) < n {
		ds, err := c.Fetch(ctx, n-len(out))
		if err != nil {
			t.Fatalf("fetch after %d of %d: %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

// expectEmpty asserts that Fetch finds nothing within d.
func expectEmpty(t *testing.T, c broker.Consumer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ds, err := c.Fetch(ctx, 10)
	if err != context.DeadlineExceeded {
		t.Fatalf("fetch on an empty queue: %d deliveries, err %v; want context.DeadlineExceeded", len(ds), err)
	}
}

func msg(queue, id string) *broker.Message {
	return &broker.Message{ID: id, Kind: "test", Queue: queue, Payload: []byte("payload of " + id)}
}

func ids(ds []*broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// expireLeases moves every lease deadline of queue into the past, as if the
// visibility timeout had run out, without waiting for it.
func (e *env) expireLeases(queue string) {
	e.t.Helper()
	ctx := context.Background()
	k := e.key(queue, "lease")
	members, err := e.c.ZRange(ctx, k, 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range members {
		if err := e.c.ZAddXX(ctx, k, redis.Z{Score: 1, Member: m}).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// dropLease ends d's lease as a reclaim does, without handing its message
// back: its lease ZSET member and its inflight HASH field go together.
func (e *env) dropLease(queue string, d *broker.Delivery) {
	e.t.Helper()
	ctx := context.Background()
	if n, err := e.c.ZRem(ctx, e.key(queue, "lease"), d.Receipt).Result(); err != nil || n != 1 {
		e.t.Fatalf("removing the lease of %s: %d, %v", d.ID, n, err)
	}
	if n, err := e.c.HDel(ctx, e.key(queue, "inflight"), d.Receipt).Result(); err != nil || n != 1 {
		e.t.Fatalf("removing the message of %s: %d, %v", d.ID, n, err)
	}
}

// deliveries returns the deliveries count in the header of d's stored
// message, read from the inflight HASH of queue.
func (e *env) deliveries(queue string, d *broker.Delivery) int {
	e.t.Helper()
	return storedDeliveries(e.t, e.c, e.key(queue, "inflight"), d)
}

// storedDeliveries returns the deliveries count in the header of d's stored
// message, read from the inflight HASH inflight.
func storedDeliveries(t *testing.T, c redis.UniversalClient, inflight string, d *broker.Delivery) int {
	t.Helper()
	v, err := c.HGet(context.Background(), inflight, d.Receipt).Result()
	if err != nil {
		t.Fatalf("stored message of %s: %v", d.Receipt, err)
	}
	h, _, err := codec.ParseHeader([]byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return h.Deliveries
}

func (e *env) llen(queue, part string) int64 {
	e.t.Helper()
	n, err := e.c.LLen(context.Background(), e.key(queue, part)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// namedClient returns a client of its own whose connections carry a unique
// name, so that a test can see in CLIENT LIST what they are doing.
func namedClient(t *testing.T) (redis.UniversalClient, string) {
	t.Helper()
	redistest.Client(t)
	opts, _, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	name := "cvt-" + strings.ReplaceAll(t.Name(), "/", "-")
	opts.ClientName = name
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c, name
}

// waitBlocked waits (at most 5s) until a connection named name is blocked
// in BZPOPMIN (an idle wait) on the server.
func waitBlocked(t *testing.T, c redis.UniversalClient, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if blockedIn(t, c, name) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection %s blocked in BZPOPMIN within 5s", name)
		}
		<-tick.C
	}
}

func blockedIn(t *testing.T, c redis.UniversalClient, name string) bool {
	t.Helper()
	return blockedCount(t, c, name) > 0
}

// blockedCount counts the connections named name blocked in an idle wait.
func blockedCount(t *testing.T, c redis.UniversalClient, name string) int {
	t.Helper()
	return redistest.Blocked(t, c, name, "bzpopmin")
}
