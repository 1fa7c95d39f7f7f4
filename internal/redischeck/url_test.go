package redischeck_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redischeck"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	const want = "; want redis://host:port/db or rediss://host:port/db"
	for _, c := range []struct{ raw, err string }{
		{"notaurl", `REDIS_URL "notaurl" is not a Redis URL: want redis://host:port/db or rediss://host:port/db`},
		{"", `REDIS_URL "" is not a Redis URL: want redis://host:port/db or rediss://host:port/db`},
		{"http://h:6379/0", `REDIS_URL "http://h:6379/0" is not a Redis URL: want redis://host:port/db or rediss://host:port/db`},
		{"redis://h:6379/abc", `REDIS_URL "redis://h:6379/abc": invalid database number: "abc"` + want},
		// The password is hidden, parsed or not.
		{"redis://u:secret@h:6379/abc", `REDIS_URL "redis://u:xxxxx@h:6379/abc": invalid database number: "abc"` + want},
		{"redis://u:secret@h:x/0", `REDIS_URL "redis://xxxxx@h:x/0" is not a Redis URL: invalid port ":x" after host` + want},
	} {
		_, err := redischeck.ParseURL(c.raw, "REDIS_URL")
		if err == nil || err.Error() != c.err {
			t.Errorf("ParseURL(%q) = %v\nwant %s", c.raw, err, c.err)
		}
	}
	o, err := redischeck.ParseURL("rediss://u:p@h:6380/2", "-redis")
	if err != nil || o.Addr != "h:6380" || o.DB != 2 || o.Username != "u" || o.Password != "p" || o.TLSConfig == nil {
		t.Fatalf("ParseURL of a good URL = %+v, %v", o, err)
	}
}

// refused returns the error of a PING to a loopback port nothing listens on,
// and that port.
func refused(t *testing.T) (error, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	return rdb.Ping(context.Background()).Err(), addr
}

func TestUnreachableSaysHowToStartOne(t *testing.T) {
	t.Parallel()
	err, addr := refused(t)
	_, port, _ := net.SplitHostPort(addr)
	remote := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		addr string
		err  error
		want string
	}{
		{addr, err, "cannot reach Redis at " + addr + " (REDIS_URL): dial tcp " + addr + ": connect: connection refused; start one with: redis-server --port " + port},
		{"127.0.0.1:6379", err, "; start one with: redis-server"},
		{"localhost:6379", err, "; start one with: redis-server"},
		{"[::1]:6380", err, "; start one with: redis-server --port 6380"},
		// Not this machine's, or not a refusal: no advice.
		{"10.1.2.3:6379", remote, "cannot reach Redis at 10.1.2.3:6379 (REDIS_URL): dial tcp: connect: connection refused"},
		{"127.0.0.1:6379", context.DeadlineExceeded, "cannot reach Redis at 127.0.0.1:6379 (REDIS_URL): context deadline exceeded"},
	} {
		got := redischeck.Unreachable(c.addr, "REDIS_URL", c.err)
		if !errors.Is(got, c.err) {
			t.Errorf("Unreachable(%s, %v) does not wrap its error", c.addr, c.err)
		}
		if !strings.HasSuffix(got.Error(), c.want) || strings.Contains(got.Error(), "\n") {
			t.Errorf("Unreachable(%s, %v) = %q\nwant one line ending %q", c.addr, c.err, got, c.want)
		}
	}
}
