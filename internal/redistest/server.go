package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// Server is a redis-server a test started for itself, on a free loopback
// port, with nothing on disk unless the test's arguments ask for it. Tests
// that must change a server's configuration (maxmemory, ACL defaults, a
// skewed clock) use one, so the shared server stays as it was.
type Server struct {
	Addr string
	Dir  string // the server's working directory, removed with the test
}

// StartServer starts a redis-server with args added to a memory-only
// configuration, waits until it answers PING and stops it (by its PID, with
// SIGKILL) when t ends. It fails t, saying how to install one, when there
// is no redis-server to run. CONVEYOR_REDIS_SERVER names the binary
// (default: redis-server on PATH).
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServer(t, nil, args)
}

// StartSkewedServer is StartServer for a server whose wall clock (TIME,
// and every time a script reads) runs offset ahead of this machine's
// (behind when negative), through the LD_PRELOAD shim
// scripts/chaos/skewclock.c, compiled with cc once per test binary. It
// fails t when there is no C compiler.
func StartSkewedServer(t testing.TB, offset time.Duration, args ...string) *Server {
	t.Helper()
	return startServer(t, redisproc.SkewEnv(skewLib(t), offset), args)
}

var (
	skewOnce sync.Once
	skewPath string
	skewErr  error
)

func skewLib(t testing.TB) string {
	t.Helper()
	skewOnce.Do(func() {
		src, err := repoFile("scripts/chaos/skewclock.c")
		if err != nil {
			skewErr = err
			return
		}
		dir, err := os.MkdirTemp("", "conveyor-skewclock-")
		if err != nil {
			skewErr = err
			return
		}
		skewPath = filepath.Join(dir, "skewclock.so")
		out, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-o", skewPath, src).CombinedOutput()
		if err != nil {
			skewErr = fmt.Errorf("cc: %v: %s (install a C compiler: apt-get install gcc)", err, out)
		}
	})
	if skewErr != nil {
		t.Fatalf("building the clock shim: %v", skewErr)
	}
	return skewPath
}

// repoFile finds rel under the module's root, the nearest directory above
// the working directory that holds go.mod.
func repoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, rel), nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory, so no %s", rel)
		}
		dir = up
	}
}

func startServer(t testing.TB, env, args []string) *Server {
	t.Helper()
	bin, err := redisproc.Bin()
	if err != nil {
		t.Fatalf("this test starts its own redis-server and %v (`make test` installs it when run as root)", err)
	}
	proc, err := redisproc.Start(t.Context(), &redisproc.Config{Bin: bin, Dir: t.TempDir(), Args: args, Env: env})
	if err != nil {
		t.Fatalf("%s: %v\n(a test's own server needs Redis 7.0 or later; CONVEYOR_REDIS_SERVER names another binary)", bin, err)
	}
	t.Cleanup(proc.Kill)
	return &Server{Addr: proc.Addr(), Dir: proc.Dir()}
}

// Client returns a client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// PID returns the process ID of the server c talks to (INFO's process_id),
// for a test to signal a server it started itself.
func PID(t testing.TB, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("process_id %q: %v", v, err)
			}
			return pid
		}
	}
	t.Fatal("INFO server has no process_id")
	return 0
}
