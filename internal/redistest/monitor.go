package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Monitor is a command log: a connection in MONITOR mode, which Redis
// sends every command it runs, those scripts run included.
type Monitor struct {
	conn  net.Conn
	r     *bufio.Reader
	rdb   *redis.Client
	lines []string
}

// StartMonitor opens a command log of the single Redis rdb talks to. It
// fails t when rdb is not a single server's client.
func StartMonitor(t testing.TB, rdb redis.UniversalClient) *Monitor {
	t.Helper()
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("MONITOR needs a single Redis, have %T", rdb)
	}
	o := c.Options()
	conn, err := net.DialTimeout("tcp", o.Addr, 5*time.Second)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	m := &Monitor{conn: conn, r: bufio.NewReader(conn), rdb: c}
	if o.Password != "" {
		m.send(t, "AUTH", o.Username, o.Password)
	}
	m.send(t, "MONITOR")
	return m
}

// send writes one command and reads its status reply.
func (m *Monitor) send(t testing.TB, args ...string) {
	t.Helper()
	var b strings.Builder
	var n int
	for _, a := range args {
		if a != "" {
			n++
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := fmt.Fprintf(m.conn, "*%d\r\n%s", n, b.String()); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	if l := m.read(t); !strings.HasPrefix(l, "+OK") {
		t.Fatalf("monitor: %s replied %q", args[0], l)
	}
}

func (m *Monitor) read(t testing.TB) string {
	t.Helper()
	m.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := m.r.ReadString('\n')
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	return strings.TrimRight(l, "\r\n")
}

// Lines returns the commands logged since the last call: it sends a marker
// (ECHO) and reads up to it, so every command Redis ran before Lines was
// called is there. Each line is MONITOR's: a time, the client, then the
// command and its arguments, quoted.
func (m *Monitor) Lines(t testing.TB) []string {
	t.Helper()
	marker := fmt.Sprintf("conveyor-monitor-marker-%d", time.Now().UnixNano())
	if err := m.rdb.Echo(context.Background(), marker).Err(); err != nil {
		t.Fatalf("monitor: ECHO: %v", err)
	}
	var out []string
	for {
		l := m.read(t)
		if strings.Contains(l, `"`+marker+`"`) {
			return out
		}
		out = append(out, l)
	}
}

// Key returns the first argument of a logged command (its key, for most
// commands), "" when it has none.
func Key(line string) string {
	f := strings.Split(line, `"`)
	if len(f) < 4 {
		return ""
	}
	return f[3]
}
