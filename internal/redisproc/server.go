package redisproc

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

// Config says which server to run and how. The zero value runs
// redis-server from PATH with a memory-only configuration.
type Config struct {
	// Bin is the redis-server binary. Defaults to Bin's.
	Bin string
	// Dir is where the server's own directory (its log, an AOF) is made.
	// Defaults to os.TempDir().
	Dir string
	// Args are added to the server's arguments, after the defaults (port,
	// bind 127.0.0.1, no RDB, no AOF, the directory and log file), so they
	// can override them: "--appendonly", "yes".
	Args []string
	// ConfigFile, when not empty, is the text of a configuration file:
	// Start writes it to redis.conf in the server's directory and passes
	// that file as the first argument, so Args and the defaults override
	// it. A sentinel needs one: it refuses to start without a config file
	// it can rewrite, and records there what it learns. Restart keeps the
	// file as the server left it.
	ConfigFile string
	// Env is added to this process's environment for the server:
	// SkewEnv's shim.
	Env []string
	// StartTimeout bounds each start. Defaults to 20 s.
	StartTimeout time.Duration
	// Keep leaves the server's directory in place after Stop, for a
	// post-mortem.
	Keep bool
}

// Server is a redis-server Start started.
type Server struct {
	cfg  Config
	dir  string
	port int // fixed after the first start, so clients reconnect to it
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a redis-server on a free loopback port and waits until it is
// the one answering there. Another process may take the port between
// choosing and binding it: Start then tries another, five times at most.
func Start(ctx context.Context, cfg *Config) (*Server, error) {
	s := &Server{}
	if cfg != nil {
		s.cfg = *cfg
	}
	if s.cfg.Bin == "" {
		bin, err := Bin()
		if err != nil {
			return nil, err
		}
		s.cfg.Bin = bin
	}
	if s.cfg.StartTimeout <= 0 {
		s.cfg.StartTimeout = 20 * time.Second
	}
	dir, err := os.MkdirTemp(s.cfg.Dir, "redis-")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	s.dir = dir
	for range 5 {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.writeConfigFile(); err != nil {
			break
		}
		if err = s.start(ctx); err == nil {
			return s, nil
		}
		if !strings.Contains(s.said(), "Address already in use") {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// Bin returns the path of the redis-server to run: the binary
// CONVEYOR_REDIS_SERVER names, else redis-server, looked up on PATH.
func Bin() (string, error) {
	bin := os.Getenv("CONVEYOR_REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("cannot find %q: install Redis 7.0 or later (apt-get install redis-server) or set CONVEYOR_REDIS_SERVER: %w", bin, err)
	}
	return path, nil
}

// SkewEnv is the environment that makes a server's wall clock (TIME, and
// every time a script reads) run offset ahead of this machine's (behind
// when negative), through lib, scripts/chaos/skewclock.c built as a shared
// object.
func SkewEnv(lib string, offset time.Duration) []string {
	return []string{"LD_PRELOAD=" + lib, "CHAOS_CLOCK_OFFSET_MS=" + strconv.FormatInt(offset.Milliseconds(), 10)}
}

// freePort returns a loopback port nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redis-server: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's port on 127.0.0.1. It does not change on Restart.
func (s *Server) Port() int { return s.port }

// Dir is the server's working directory: its log, and an AOF if its
// arguments ask for one.
func (s *Server) Dir() string { return s.dir }

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

func (s *Server) configPath() string { return filepath.Join(s.dir, "redis.conf") }

// writeConfigFile writes Config.ConfigFile afresh for each try of Start, so
// that every try starts from the caller's text, whatever an earlier try's
// server wrote there.
func (s *Server) writeConfigFile() error {
	if s.cfg.ConfigFile == "" {
		return nil
	}
	if err := os.WriteFile(s.configPath(), []byte(s.cfg.ConfigFile), 0o600); err != nil {
		return fmt.Errorf("redis-server: config file: %w", err)
	}
	return nil
}

// said is what the server wrote before its log was open (a bad argument)
// and the end of its log.
func (s *Server) said() string {
	out, _ := os.ReadFile(filepath.Join(s.dir, "redis.out"))
	log, _ := os.ReadFile(s.logPath())
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	return string(out) + string(log)
}

// start runs the server on s.port and waits until it answers PING (it has
// loaded its data) and INFO names its PID: PING alone could be answered by
// another server that took the port meanwhile.
func (s *Server) start(ctx context.Context) error {
	_ = os.Remove(s.logPath())
	var args []string
	if s.cfg.ConfigFile != "" {
		args = append(args, s.configPath())
	}
	args = append(args,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--daemonize", "no",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", s.logPath())
	args = append(args, s.cfg.Args...)
	// What the server says before its log is open (a bad argument) goes to
	// redis.out.
	out, err := os.Create(filepath.Join(s.dir, "redis.out"))
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	cmd := exec.Command(s.cfg.Bin, args...)
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); _ = out.Close(); close(done) }(s.done)

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	want := "process_id:" + strconv.Itoa(cmd.Process.Pid) + "\r\n"
	deadline := time.Now().Add(s.cfg.StartTimeout)
	tick := time.NewTicker(20 * time.Millisecond) // polling a start-up: no event to wait on
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		if err == nil {
			var info string
			if info, err = rdb.Info(pctx, "server").Result(); err == nil && !strings.Contains(info, want) {
				err = errors.New("another server answers on its port")
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer within %v: %v: %s", s.port, s.cfg.StartTimeout, err, lastLines(s.said(), 5))
		}
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, lastLines(s.said(), 5))
		case <-tick.C:
		}
	}
}

// Kill SIGKILLs the server and waits until it is gone.
func (s *Server) Kill() {
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Restart SIGKILLs the server and starts it again on its port, in its
// directory (an AOF there is loaded).
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	return s.start(ctx)
}

// Stop asks the server to exit (SIGTERM), SIGKILLs it after 10 s, and
// removes its directory (unless Config.Keep).
func (s *Server) Stop() {
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
	if !s.cfg.Keep {
		_ = os.RemoveAll(s.dir)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
