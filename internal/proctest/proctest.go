// Package proctest runs a test binary again as a child process, so that
// crash tests can SIGKILL, SIGSTOP and restart real workers. A package's
// TestMain hands control to Main, which runs the child entry point named in
// the environment instead of the tests.
package proctest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Children are the child entry points of one test package, by name. The
// context an entry point gets ends on SIGTERM or SIGINT; a SIGKILLed child
// just dies.
type Children struct {
	env   string
	Funcs map[string]func(ctx context.Context) error
}

// New returns the entry points of a package whose children read their name
// from the environment variable env. Test files add theirs to Funcs from an
// init func.
func New(env string) *Children {
	return &Children{env: env, Funcs: map[string]func(ctx context.Context) error{}}
}

// Main runs the child entry point named in the environment, or else the
// tests, checking that no goroutine outlives them (go-redis's pool reaper
// aside).
func (c *Children) Main(m *testing.M) {
	if name := os.Getenv(c.env); name != "" {
		os.Exit(c.run(name))
	}
	goleak.VerifyTestMain(m,
		// go-redis keeps a pool reaper per shared client (redistest.Client).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

func (c *Children) run(name string) int {
	f, ok := c.Funcs[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "test child: no entry point %q\n", name)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "test child %s (pid %d): %v\n", name, os.Getpid(), err)
		return 1
	}
	return 0
}

// Child is a running child process.
type Child struct {
	Cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Start runs the entry point name in a new process with the extra
// environment env ("KEY=value"); its output goes to the test's stderr. A
// child still running when t ends is killed.
func (c *Children) Start(t testing.TB, name string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), c.env+"="+name), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", name, err)
	}
	ch := &Child{Cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(ch.done)
	}()
	t.Cleanup(func() { ch.Kill(t) })
	return ch
}

// Kill SIGKILLs the child (if it still runs) and waits until it is gone.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	if c.Exited() {
		return
	}
	if err := c.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("kill child %d: %v", c.Cmd.Process.Pid, err)
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Errorf("child %d still running 10s after SIGKILL", c.Cmd.Process.Pid)
	}
}

// Exited reports whether the child has ended.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Client connects a child process to the Redis the tests use.
func Client() (redis.UniversalClient, error) {
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
