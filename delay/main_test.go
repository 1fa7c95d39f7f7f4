package delay_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Crash tests re-execute this test binary as a child process and SIGKILL it
// (internal/proctest). A test file adds its entry points to children from
// an init func.
var procs = proctest.New("CONVEYOR_DELAY_CHILD")

var children = procs.Funcs

// Every goroutine a promoter, pool or watch starts must be gone once the
// tests have stopped them.
func TestMain(m *testing.M) { procs.Main(m) }

func startChild(t testing.TB, name string, env ...string) *proctest.Child {
	t.Helper()
	return procs.Start(t, name, env...)
}

var childClient = proctest.Client

// timerDrivers are the drivers with timers the tests run on: the durable
// drivers, plain and, on one server, the list driver behind a shard.Driver
// of 6 partitions; on a Redis Cluster (make test-cluster) both behind a
// shard.Driver of 6 partitions and of 1 (on one server that passes every
// call through to the plain drivers, which run anyway, and what a split
// adds is the same over either driver: make test runs on 2 cores). The
// benchmarks run on benchDrivers, whole queues only.
var (
	timerDrivers = shardedToo(drivertest.Durable, drivertest.Sharded)
	benchDrivers = drivertest.Durable
)

func shardedToo(plain, sharded []drivertest.Driver) []drivertest.Driver {
	out := slices.Clone(plain)
	for _, d := range sharded {
		if redistest.IsCluster() || d.Name == "list-shard6" {
			out = append(out, d)
		}
	}
	return out
}

// mustDriver makes the driver for a test.
// childDriver builds, in a child process, the driver named driver under
// prefix on a client of its own, which the caller closes.
func childDriver(driver, prefix string) (broker.Driver, redis.UniversalClient, error) {
	td, ok := drivertest.Named(driver)
	if !ok {
		return nil, nil, fmt.Errorf("no driver %q", driver)
	}
	rdb, err := childClient()
	if err != nil {
		return nil, nil, err
	}
	d, err := td.Open(rdb, prefix)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return d, rdb, nil
}

// timerCounts returns the sizes of queue's delayed ZSET and timers HASH
// (summed over its partitions when td splits it).
func timerCounts(ctx context.Context, td drivertest.Driver, rdb redis.UniversalClient, prefix, queue string) (delayed, bodies int64, err error) {
	for _, p := range td.Parts(queue) {
		k := timers.QueueKeys(prefix, p)
		pipe := rdb.Pipeline()
		z := pipe.ZCard(ctx, k.Delayed)
		h := pipe.HLen(ctx, k.Timers)
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, 0, err
		}
		delayed += z.Val()
		bodies += h.Val()
	}
	return delayed, bodies, nil
}

// waitUntil checks cond every few milliseconds until it holds, failing t
// after timeout. It waits for a state of Redis that no event announces to
// a test (a list growing, a set emptying): each check is one read.
func waitUntil(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
