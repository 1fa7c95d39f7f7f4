package redisproc_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server in a test directory, stopped when t ends.
func start(t *testing.T, args ...string) *redisproc.Server {
	t.Helper()
	srv, err := redisproc.Start(context.Background(), &redisproc.Config{Dir: t.TempDir(), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func client(t *testing.T, srv *redisproc.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRestartKeepsPortAndAOF(t *testing.T) {
	t.Parallel()
	srv := start(t, "--appendonly", "yes", "--appendfsync", "always")
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") || srv.Addr() == "127.0.0.1:6379" {
		t.Fatalf("Addr = %s, want a free loopback port", srv.Addr())
	}
	ctx := context.Background()
	if err := client(t, srv).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", srv.Addr(), addr)
	}
	if v, err := client(t, srv).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after a restart: GET k = %q, %v; want v from the AOF", v, err)
	}
}

func TestKillAndStop(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	c := client(t, srv)
	srv.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	srv.Stop() // after Kill: returns at once, removes the directory
	if _, err := os.Stat(srv.Dir()); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s (%v)", srv.Dir(), err)
	}
}

func TestStartFailsWithTheServersWords(t *testing.T) {
	t.Parallel()
	_, err := redisproc.Start(context.Background(), &redisproc.Config{Dir: t.TempDir(),
		Args: []string{"--no-such-option", "x"}, StartTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("Start with a bad option = %v, want an error saying it exited at start, naming the option", err)
	}
}
