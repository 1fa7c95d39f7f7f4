// Package proctest runs a test binary again as a child process, so that
// crash tests can SIGKILL, SIGSTOP and restart real workers. A package's
// TestMain hands control to Main, which runs the child entry point named in
// the environment instead of the tests.
package proctest

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// Child is a running child process. Closing its stdin (Stop) asks it to
// stop; its stdin also closes when the test process dies.
type Child struct {
	Cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed when the process has exited
	err   error         // Wait's result, once done is closed
}

// Start runs the entry point name in a new process with the extra
// environment env ("KEY=value"); its output goes to the test's stderr. A
// child still running when t ends is killed.
func (c *Children) Start(t testing.TB, name string, env ...string) *Child {
	t.Helper()
	return start(t, []string{"-test.run=^$"}, append([]string{c.env + "=" + name}, env...))
}

// StartTest runs the test named test in a new process with the extra
// environment env, for a test that runs its child code itself when env says
// so. Otherwise as Start.
func StartTest(t testing.TB, test string, env ...string) *Child {
	t.Helper()
	return start(t, []string{"-test.run=^" + test + "$", "-test.count=1"}, env)
}

func start(t testing.TB, args, env []string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %v: %v", args, err)
	}
	ch := &Child{Cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	t.Cleanup(func() { ch.Kill(t) })
	return ch
}

// Done is closed once the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is how the child ended (Wait's result); read it after Done.
func (c *Child) Err() error { return c.err }

// Killed reports whether the child ended by SIGKILL; read it after Done.
func (c *Child) Killed() bool {
	var ee *exec.ExitError
	return errors.As(c.err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
}

// Stop asks the child to stop (closes its stdin) and waits until it has
// exited, returning how it ended (nil for exit status 0).
func (c *Child) Stop(t testing.TB, timeout time.Duration) error {
	t.Helper()
	_ = c.stdin.Close()
	select {
	case <-c.done:
		return c.err
	case <-time.After(timeout):
		t.Fatalf("child %d did not stop within %v of being asked", c.Cmd.Process.Pid, timeout)
		return nil
	}
}

// UntilStdinCloses returns, in a child, a context cancelled when its stdin
// reaches its end: the parent called Stop, or died.
func UntilStdinCloses() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return ctx, cancel
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
