package delay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/proctest"
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

// timerDriver is a driver with timers, and where it puts promoted messages.
type timerDriver struct {
	name string
	new  func(rdb redis.UniversalClient, prefix string) (broker.Driver, error)
	// readyKey is the key promoted messages of a queue go to.
	readyKey func(prefix, queue string) string
}

// timerDrivers are the drivers with timers the tests run on.
var timerDrivers = []timerDriver{
	{
		name: "list",
		new: func(rdb redis.UniversalClient, prefix string) (broker.Driver, error) {
			return list.New(rdb, &list.Config{Prefix: prefix})
		},
		readyKey: func(prefix, queue string) string { return keys.Queue(prefix, queue).Part("ready") },
	},
	{
		name: "stream",
		new: func(rdb redis.UniversalClient, prefix string) (broker.Driver, error) {
			return stream.New(rdb, &stream.Config{Prefix: prefix})
		},
		readyKey: func(prefix, queue string) string { return keys.Queue(prefix, queue).Part("stream") },
	},
}

// timerDriverNamed returns the driver called name.
func timerDriverNamed(name string) (timerDriver, error) {
	for _, d := range timerDrivers {
		if d.name == name {
			return d, nil
		}
	}
	return timerDriver{}, fmt.Errorf("no driver %q", name)
}

// mustDriver makes the driver for a test.
// childDriver builds, in a child process, the driver named driver under
// prefix on a client of its own, which the caller closes.
func childDriver(driver, prefix string) (broker.Driver, redis.UniversalClient, error) {
	td, err := timerDriverNamed(driver)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := childClient()
	if err != nil {
		return nil, nil, err
	}
	d, err := td.new(rdb, prefix)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return d, rdb, nil
}

func (td timerDriver) mustDriver(t testing.TB, rdb redis.UniversalClient, prefix string) broker.Driver {
	t.Helper()
	d, err := td.new(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// readyLen counts the messages in queue's ready structure (for the stream
// driver: its entries, delivered or not; acked entries are deleted).
func (td timerDriver) readyLen(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (int64, error) {
	k := td.readyKey(prefix, queue)
	if td.name == "stream" {
		return rdb.XLen(ctx, k).Result()
	}
	return rdb.LLen(ctx, k).Result()
}

// timerCounts returns the sizes of queue's delayed ZSET and timers HASH.
func timerCounts(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (delayed, bodies int64, err error) {
	k := timers.QueueKeys(prefix, queue)
	pipe := rdb.Pipeline()
	z := pipe.ZCard(ctx, k.Delayed)
	h := pipe.HLen(ctx, k.Timers)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, err
	}
	return z.Val(), h.Val(), nil
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

// runInBackground runs run until the returned stop is called (or t ends)
// and reports an error it returned.
func runInBackground(t testing.TB, run func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return within 30s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
