package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// Crash tests re-execute this test binary as a child process and SIGKILL
// it. The child reads its entry point's name from childEnv and its
// parameters from further variables; TestMain runs it instead of the tests.
const childEnv = "CONVEYOR_MIDDLEWARE_CHILD"

// children maps a child name to its entry point; test files add theirs from
// an init func. The context ends on SIGTERM or SIGINT.
var children = map[string]func(ctx context.Context) error{}

// Every goroutine a middleware or a pool starts must be gone once the tests
// are over (Idempotency's lease keeper above all).
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
		fmt.Fprintf(os.Stderr, "middleware test child: no entry point %q\n", name)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "middleware test child %s (pid %d): %v\n", name, os.Getpid(), err)
		return 1
	}
	return 0
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

// env is one test's Redis, key prefix, list driver and client (queue "q").
type env struct {
	rdb    redis.UniversalClient
	prefix string
	d      broker.Driver
	client *conveyor.Client
}

func newEnv(t *testing.T) env {
	t.Helper()
	e, err := envOn(redistest.Client(t), redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func envOn(rdb redis.UniversalClient, prefix string) (env, error) {
	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		return env{}, err
	}
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "q"})
	if err != nil {
		return env{}, err
	}
	return env{rdb: rdb, prefix: prefix, d: d, client: c}, nil
}

// start runs p in the background; the returned func (also run at cleanup)
// stops it and waits for Run to return.
func start(t *testing.T, p *worker.Pool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
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
				t.Errorf("pool did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, d time.Duration, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// fakeSettler records settle calls, for middleware tests that need no pool.
type fakeSettler struct {
	mu        sync.Mutex
	acks      int
	retries   []time.Time
	postpones []time.Time
	discards  []string
}

func (s *fakeSettler) Ack(context.Context, *broker.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acks++
	return nil
}

func (s *fakeSettler) Retry(_ context.Context, _ *broker.Delivery, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retries = append(s.retries, at)
	return nil
}

func (s *fakeSettler) Postpone(_ context.Context, _ *broker.Delivery, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.postpones = append(s.postpones, at)
	return nil
}

func (s *fakeSettler) Discard(_ context.Context, _ *broker.Delivery, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discards = append(s.discards, reason)
	return nil
}

func (s *fakeSettler) Extend(context.Context, *broker.Delivery, time.Duration) error { return nil }

// newJob returns a job of kind on queue "q" settled through s.
func newJob(s *fakeSettler, id, kind string, headers map[string]string) *conveyor.Job {
	d := &broker.Delivery{
		Message: broker.Message{ID: id, Kind: kind, Queue: "q", Payload: []byte("payload"), Headers: headers},
		Receipt: "r-" + id, Token: "1",
	}
	return conveyor.NewJob(d, s)
}

// goid returns the ID of the calling goroutine.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	b = b[:bytes.IndexByte(b, ' ')]
	n, _ := strconv.ParseUint(string(b), 10, 64)
	return n
}

// child is a running child process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startChild runs the child entry point name in a new process with the
// extra environment env ("KEY=value"); its output goes to the test's
// stderr. A child still running when t ends is killed.
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
