package delay_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Crash tests re-execute this test binary as a child process and SIGKILL it.
// The child reads which entry point to run from childEnv and its parameters
// from further environment variables; TestMain runs it instead of the tests.
// A test file adds its entry points to children from an init func.
const childEnv = "CONVEYOR_DELAY_CHILD"

// children maps a child name (the value of childEnv) to its entry point.
// The context ends on SIGTERM or SIGINT; a SIGKILLed child just dies.
var children = map[string]func(ctx context.Context) error{}

// Every goroutine a promoter, pool or watch starts must be gone once the
// tests have stopped them.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(runChild(name))
	}
	goleak.VerifyTestMain(m,
		// go-redis keeps a pool reaper per shared client (redistest.Client).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

func runChild(name string) int {
	f, ok := children[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "delay test child: no entry point %q\n", name)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "delay test child %s (pid %d): %v\n", name, os.Getpid(), err)
		return 1
	}
	return 0
}

// child is a running child process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startChild runs the child entry point name in a new process with the extra
// environment env ("KEY=value"); its output goes to the test's stderr. A
// child still running when t ends is killed.
func startChild(t testing.TB, name string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+name), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", name, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { c.kill(t) })
	return c
}

// kill SIGKILLs the child (if it still runs) and waits until it is gone.
func (c *child) kill(t testing.TB) {
	t.Helper()
	select {
	case <-c.done:
		return
	default:
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("kill child %d: %v", c.cmd.Process.Pid, err)
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Errorf("child %d still running 10s after SIGKILL", c.cmd.Process.Pid)
	}
}

// exited reports whether the child has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// childClient connects a child process to the Redis the tests use.
func childClient() (redis.UniversalClient, error) {
	opts, target, err := redistest.Options()
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", target, err)
	}
	rdb := redis.NewUniversalClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", target, err)
	}
	return rdb, nil
}

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
