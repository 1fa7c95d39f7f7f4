package redischeck_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestRealRedisPasses(t *testing.T) {
	t.Parallel()
	if err := redischeck.Check(context.Background(), redistest.Client(t), slog.New(slog.DiscardHandler), "x"); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	err = redischeck.Check(context.Background(), rdb, slog.New(slog.DiscardHandler), "list")
	if err == nil || !strings.Contains(err.Error(), "list: redis unreachable") {
		t.Fatalf("err = %v, want a clear unreachable error", err)
	}
}

// TestMiniredisVersionFromHELLO: miniredis refuses INFO server but says
// its version in HELLO: the check reads it there and warns of nothing.
func TestMiniredisVersionFromHELLO(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	if err := rdb.Info(context.Background(), "server").Err(); err == nil {
		t.Fatal("miniredis answers INFO server now: this test no longer covers the HELLO path")
	}
	var buf bytes.Buffer
	err := redischeck.Check(context.Background(), rdb, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "list")
	if err != nil {
		t.Fatal(err)
	}
	if l := buf.String(); strings.Contains(l, "level=WARN") || !strings.Contains(l, "version read from HELLO") || !strings.Contains(l, "server=miniredis") {
		t.Fatalf("want the version read from HELLO and no warning, logged: %q", l)
	}
}

// TestINFORefusedByACL: a real Redis whose ACL user may not run INFO is
// checked through HELLO, without a warning.
func TestINFORefusedByACL(t *testing.T) {
	t.Parallel()
	_, rdb := redistest.ACLUser(t, "+@all", "-info", "~"+redistest.Prefix(t)+":*")
	ctx := context.Background()
	var reply redis.Error
	if err := rdb.Info(ctx, "server").Err(); !errors.As(err, &reply) {
		t.Fatalf("INFO server as the ACL user: %v, want a refusal", err)
	}
	var buf bytes.Buffer
	if err := redischeck.Check(ctx, rdb, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "list"); err != nil {
		t.Fatal(err)
	}
	if l := buf.String(); strings.Contains(l, "level=WARN") || !strings.Contains(l, "server=redis") {
		t.Fatalf("want the version read from HELLO and no warning, logged: %q", l)
	}
}

// TestUnreadableVersionWarns: a server that refuses both INFO and HELLO
// (a proxy, a server older than 6.0 with INFO renamed) is let through with
// a warning rather than refused.
func TestUnreadableVersionWarns(t *testing.T) {
	t.Parallel()
	rdb := fakeServer(t, nil)
	var buf bytes.Buffer
	err := redischeck.Check(context.Background(), rdb, slog.New(slog.NewTextHandler(&buf, nil)), "list")
	if err != nil {
		t.Fatal(err)
	}
	if l := buf.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "cannot read the server version") {
		t.Fatalf("no warning logged: %q", l)
	}
}

// TestTooOld: a server that says it is Redis 6.2 is refused, whether it
// says so in INFO server or, refusing INFO, in HELLO.
func TestTooOld(t *testing.T) {
	t.Parallel()
	for name, answers := range map[string]map[string]string{
		"INFO":  {"INFO": bulk("# Server\r\nredis_version:6.2.0\r\n")},
		"HELLO": {"HELLO": "*6\r\n" + bulk("server") + bulk("redis") + bulk("version") + bulk("6.2.0") + bulk("proto") + ":2\r\n"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := redischeck.Check(context.Background(), fakeServer(t, answers), slog.New(slog.DiscardHandler), "list")
			if !errors.Is(err, broker.ErrRedisTooOld) || !strings.Contains(err.Error(), "redis 6.2.0") {
				t.Fatalf("err = %v, want ErrRedisTooOld naming 6.2.0", err)
			}
		})
	}
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// fakeServer starts a tiny RESP2 server that answers PING, replies to the
// commands in answers (by name) with their raw reply, and refuses every
// other command; it returns a RESP2 client of it.
func fakeServer(t *testing.T, answers map[string]string) *redis.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); serveFake(conn, answers) }()
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func serveFake(conn net.Conn, answers map[string]string) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		var args []string
		for range n {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.TrimSpace(arg))
		}
		if len(args) == 0 {
			return
		}
		cmd := strings.ToUpper(args[0])
		switch reply, ok := answers[cmd]; {
		case ok:
			conn.Write([]byte(reply))
		case cmd == "PING":
			conn.Write([]byte("+PONG\r\n"))
		default:
			fmt.Fprintf(conn, "-ERR unknown command '%s'\r\n", args[0])
		}
	}
}
