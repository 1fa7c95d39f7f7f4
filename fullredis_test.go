package conveyor_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// fillUp sets rdb's maxmemory to headroom bytes over what it uses now, with
// noeviction, so that Redis refuses writes once that much more is stored.
func fillUp(t *testing.T, rdb *redis.Client, headroom int64) {
	t.Helper()
	ctx := context.Background()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			used, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if used == 0 {
		t.Fatalf("no used_memory in INFO memory")
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+headroom, 10)).Err(); err != nil {
		t.Fatal(err)
	}
}

// ownServer starts a redis-server for t alone and opens drv and a client on
// it, with every key under the prefix "full".
func ownServer(t *testing.T, drv drivertest.Driver) (*redis.Client, broker.Driver, *conveyor.Client) {
	t.Helper()
	rdb := redistest.StartServer(t).Client(t)
	d := drv.Must(t, rdb, "full")
	c, err := conveyor.NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rdb, d, c
}

func isOOM(err error) bool { return err != nil && strings.Contains(err.Error(), "OOM") }

// onOwnServers runs f in a parallel subtest per durable driver, each on a
// redis-server of its own (ownServer), with a context of a minute.
func onOwnServers(t *testing.T, f func(t *testing.T, ctx context.Context, drv drivertest.Driver, rdb *redis.Client, d broker.Driver, c *conveyor.Client)) {
	t.Helper()
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			rdb, d, c := ownServer(t, drv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			f(t, ctx, drv, rdb, d, c)
		})
	}
}

// storeJobs stores n jobs (a multiple of 100) of 2,000-byte payloads in
// the default queue, 100 a call, and returns the payload.
func storeJobs(t *testing.T, ctx context.Context, c *conveyor.Client, n int) []byte {
	t.Helper()
	payload := bytes.Repeat([]byte("x"), 2000)
	reqs := make([]conveyor.Request, 100)
	for i := range reqs {
		reqs[i] = conveyor.Request{Kind: "k", Args: payload}
	}
	for range n / len(reqs) {
		if _, err := c.EnqueueMany(ctx, reqs...); err != nil {
			t.Fatal(err)
		}
	}
	return payload
}

// TestFullRedisDrains: on a Redis at its maxmemory with noeviction, new
// jobs are refused, and workers still fetch and ack every stored job, each
// once, and the queue ends empty: settling frees memory, so it must not be
// refused.
//
// With a concurrency limit on the queue, set before Redis fills, a fetch
// also takes slots and parks what is over the limit, which writes.
func TestFullRedisDrains(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, 30} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			onOwnServers(t, func(t *testing.T, ctx context.Context, drv drivertest.Driver, rdb *redis.Client, d broker.Driver, c *conveyor.Client) {
				testFullRedisDrains(t, ctx, drv, rdb, d, c, limit)
			})
		})
	}
}

func testFullRedisDrains(t *testing.T, ctx context.Context, drv drivertest.Driver, rdb *redis.Client, d broker.Driver, c *conveyor.Client, limit int) {
	if limit > 0 {
		insp, err := conveyor.NewInspector(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := insp.SetLimit(ctx, "default", "", limit); err != nil {
			t.Fatal(err)
		}
	}
	const n = 600
	payload := storeJobs(t, ctx, c, n)
	fillUp(t, rdb, 0)
	if _, err := c.Enqueue(ctx, "k", payload, nil); !isOOM(err) {
		t.Fatalf("Enqueue on a full Redis: %v, want an OOM error", err)
	}
	cons, err := d.Open(ctx, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	seen := map[string]bool{}
	for len(seen) < n {
		ds, err := cons.Fetch(ctx, 50)
		if err != nil {
			t.Fatalf("fetch after %d jobs: %v", len(seen), err)
		}
		for _, dl := range ds {
			if seen[dl.ID] {
				t.Fatalf("job %s delivered twice", dl.ID)
			}
			seen[dl.ID] = true
		}
		if err := cons.Ack(ctx, ds...); err != nil {
			t.Fatalf("ack on a full Redis after %d jobs: %v", len(seen), err)
		}
	}
	if left, err := drv.ReadyLen(ctx, rdb, "full", "default"); err != nil || left != 0 {
		t.Fatalf("ready after draining: %d, %v", left, err)
	}
}

// TestFullRedisEnqueueManyAllOrNothing: when Redis fills up during a big
// EnqueueMany for one queue, the call stores every job or none: a caller
// told "error" has nothing stored it could not name.
func TestFullRedisEnqueueManyAllOrNothing(t *testing.T) {
	onOwnServers(t, func(t *testing.T, ctx context.Context, drv drivertest.Driver, rdb *redis.Client, _ broker.Driver, c *conveyor.Client) {
		// Warm up: the scripts loaded and the queue registered.
		if _, err := c.EnqueueMany(ctx, conveyor.Request{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		fillUp(t, rdb, 2<<20)
		payload := bytes.Repeat([]byte("x"), 1000)
		reqs := make([]conveyor.Request, 3000) // about 3 MB: more than the headroom
		for i := range reqs {
			reqs[i] = conveyor.Request{Kind: "k", Args: payload}
		}
		want, refused := int64(1), 0
		for call := 0; refused == 0 && call < 10; call++ {
			_, err := c.EnqueueMany(ctx, reqs...)
			got, lerr := drv.ReadyLen(ctx, rdb, "full", "default")
			if lerr != nil {
				t.Fatal(lerr)
			}
			switch {
			case err == nil:
				want += int64(len(reqs))
			case isOOM(err):
				refused++
			default:
				t.Fatalf("call %d: %v", call, err)
			}
			if got != want {
				t.Fatalf("call %d returned %v and the queue holds %d jobs, want %d: stored in part", call, err, got, want)
			}
		}
		if refused == 0 {
			t.Fatal("Redis never refused a call: the test did not fill it")
		}
	})
}

// TestFullRedisKeepsLeasesAndSettles: on a Redis at its maxmemory with
// noeviction, a worker's other calls work too: a heartbeat extends its
// leases (a long job must not lose its lease, run twice and count toward
// poison because Redis is full), and a retry, a release and a discard
// settle their jobs, a retry for later included, and a due timer is
// promoted. None of them adds memory for good: each moves a job.
func TestFullRedisKeepsLeasesAndSettles(t *testing.T) {
	onOwnServers(t, func(t *testing.T, ctx context.Context, _ drivertest.Driver, rdb *redis.Client, d broker.Driver, c *conveyor.Client) {
		payload := storeJobs(t, ctx, c, 100)
		cons, err := d.Open(ctx, "default", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close(ctx)
		// A timer due at once, promoted once Redis is full.
		timer, err := c.Enqueue(ctx, "k", payload, &conveyor.EnqueueOptions{Delay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ds := brokertest.FetchN(t, cons, 5, 5, 5*time.Second)
		fillUp(t, rdb, 0)
		if _, err := c.Enqueue(ctx, "k", payload, nil); !isOOM(err) {
			t.Fatalf("Enqueue on a full Redis: %v, want an OOM error", err)
		}
		if err := cons.Extend(ctx, time.Minute, ds...); err != nil {
			t.Fatalf("Extend on a full Redis: %v", err)
		}
		if err := cons.Retry(ctx, ds[0], time.Time{}); err != nil {
			t.Fatalf("Retry on a full Redis: %v", err)
		}
		if err := cons.Release(ctx, ds[1]); err != nil {
			t.Fatalf("Release on a full Redis: %v", err)
		}
		if err := cons.Discard(ctx, ds[2], "full"); err != nil {
			t.Fatalf("Discard on a full Redis: %v", err)
		}
		if err := cons.Ack(ctx, ds[3]); err != nil {
			t.Fatalf("Ack on a full Redis: %v", err)
		}
		if err := cons.Retry(ctx, ds[4], time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("Retry later (a timer) on a full Redis: %v", err)
		}
		tm := d.(broker.Timers)
		redistest.Eventually(t, "the due timer promoted on a full Redis", func() bool {
			p, err := tm.Promote(ctx, "default", 100)
			if err != nil {
				t.Fatalf("Promote on a full Redis: %v", err)
			}
			return p.Promoted == 1
		})
		got := brokertest.Fetch(t, cons, 100, 5*time.Second)
		if !slices.ContainsFunc(got, func(d *broker.Delivery) bool { return d.ID == timer.ID }) {
			t.Fatalf("the promoted timer %s was not fetched (got %d deliveries)", timer.ID, len(got))
		}
	})
}
