package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server a test started for itself, on a free loopback
// port, with nothing on disk unless the test's arguments ask for it. Tests
// that must change a server's configuration (maxmemory, ACL defaults, a
// skewed clock) use one, so the shared server stays as it was.
type Server struct {
	Addr string
	Dir  string // the server's working directory, removed with the test
	cmd  *exec.Cmd
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
	lib := skewLib(t)
	return startServer(t, []string{"LD_PRELOAD=" + lib, "CHAOS_CLOCK_OFFSET_MS=" + strconv.FormatInt(offset.Milliseconds(), 10)}, args)
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
	bin := os.Getenv("CONVEYOR_REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("this test starts its own redis-server and cannot find %q: install Redis 7+ "+
			"(`apt-get install redis-server`; `make test` does it when run as root) or set CONVEYOR_REDIS_SERVER", bin)
	}
	var lastErr error
	for range 5 { // another process may take the free port before the server binds it
		port, err := freePort()
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		dir := t.TempDir()
		full := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, args...)
		cmd := exec.Command(path, full...)
		if env != nil {
			cmd.Env = append(os.Environ(), env...)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", path, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, cmd: cmd}
		if lastErr = s.waitReady(exited); lastErr == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			return s
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

func (s *Server) waitReady(exited <-chan error) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("exited (%v): %s", err, log)
		case <-tick.C:
		}
	}
}

// Client returns a client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("not a TCP address: %v", l.Addr())
	}
	return addr.Port, nil
}
