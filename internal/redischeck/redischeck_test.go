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

// TestUnreadableVersionWarns: a server that refuses INFO server (miniredis
// does) is let through with a warning rather than refused.
func TestUnreadableVersionWarns(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	var buf bytes.Buffer
	err := redischeck.Check(context.Background(), rdb, slog.New(slog.NewTextHandler(&buf, nil)), "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "cannot read the server version") {
		t.Fatalf("no warning logged: %q", buf.String())
	}
}

// TestTooOld: a server that says it is Redis 6.2 is refused.
func TestTooOld(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveOld(conn)
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	err = redischeck.Check(context.Background(), rdb, slog.New(slog.DiscardHandler), "list")
	if !errors.Is(err, broker.ErrRedisTooOld) {
		t.Fatalf("err = %v, want ErrRedisTooOld", err)
	}
}

// serveOld is a tiny RESP server that claims to be Redis 6.2.
func serveOld(conn net.Conn) {
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
		switch strings.ToUpper(args[0]) {
		case "PING":
			conn.Write([]byte("+PONG\r\n"))
		case "INFO":
			body := "# Server\r\nredis_version:6.2.0\r\n"
			fmt.Fprintf(conn, "$%d\r\n%s\r\n", len(body), body)
		default:
			conn.Write([]byte("-ERR unknown command\r\n"))
		}
	}
}
