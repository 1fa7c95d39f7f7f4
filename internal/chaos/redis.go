package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is one redis-server this program started on a loopback port.
// It is only ever signalled by the PID it was started with, while this
// program still waits for it (so the PID cannot have been reused).
type redisServer struct {
	bin  string
	dir  string   // its working directory (AOF files, log)
	port int      // fixed after the first start, so clients reconnect to it
	args []string // extra arguments, e.g. --appendonly yes
	env  []string // extra environment, e.g. LD_PRELOAD of the clock shim
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startRedis starts a redis-server in a new directory under dir, on a free
// loopback port, with nothing on disk unless args ask for it, and waits until
// it answers PING.
func startRedis(ctx context.Context, bin, dir string, env []string, args ...string) (*redisServer, error) {
	d, err := os.MkdirTemp(dir, "redis-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{bin: bin, dir: d, args: args, env: env}
	for try := 0; try < 5; try++ {
		s.port, err = freePort()
		if err != nil {
			return nil, err
		}
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if !strings.Contains(s.logTail(), "Address already in use") {
			return nil, err
		}
	}
	return nil, fmt.Errorf("redis-server: no free port after 5 tries: %w", err)
}

// freePort returns a loopback port nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's host:port.
func (s *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) logPath() string { return filepath.Join(s.dir, "redis.log") }

func (s *redisServer) logTail() string {
	b, _ := os.ReadFile(s.logPath())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// start runs the server on s.port (again, after a kill) and waits until its
// log says it accepts connections and it answers PING: PING alone could be
// answered by another server that took the port meanwhile.
func (s *redisServer) start(ctx context.Context) error {
	_ = os.Remove(s.logPath())
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--daemonize", "no",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", s.logPath(),
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = nil, nil
	// A server must not outlive this program, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)

	deadline := time.Now().Add(20 * time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	for {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, lastLines(s.logTail(), 5))
		default:
		}
		if strings.Contains(s.logTail(), "Ready to accept connections") {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err := rdb.Ping(pctx).Err()
			cancel()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer within 20s: %s", s.port, lastLines(s.logTail(), 5))
		}
		time.Sleep(20 * time.Millisecond) // polling a start-up: no event to wait on
	}
}

// Kill SIGKILLs the server and waits until it is gone.
func (s *redisServer) Kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Restart starts the server again on its port, with its directory (an AOF
// in it is loaded).
func (s *redisServer) Restart(ctx context.Context) error {
	s.Kill()
	return s.start(ctx)
}

// Stop asks the server to exit (SIGTERM), SIGKILLs it after 10 s, and removes
// its directory.
func (s *redisServer) Stop() {
	if s.cmd != nil {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				s.Kill()
			}
		}
	}
	_ = os.RemoveAll(s.dir)
}

// admin returns a client for the harness's own reads: direct, never through
// a proxy, as the default user, without re-sends.
func (s *redisServer) admin() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// isConnErr reports whether err says the connection failed, so that the
// outcome of the command is unknown (as opposed to a reply from Redis).
func isConnErr(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false
	}
	return true
}
