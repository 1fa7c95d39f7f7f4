package devredis

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// syncBuffer is a bytes.Buffer safe to share with the code under test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The fallback path: nothing on the probed address, no REDIS_URL. The
// embedded Redis must expire a PX key in real time thanks to the ticker, and
// the loud warning must reach stderr and the log.
func TestEmbeddedFallbackExpiresTTLAndWarns(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var stderr, logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	probed := closedAddr(t)
	c, cleanup, err := connect(ctx, logger, options{probeAddr: probed, stderr: &stderr, tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(cleanup)

	const ttl = 150 * time.Millisecond
	start := time.Now()
	// SET and EXISTS in one MULTI so a slow machine cannot expire the key
	// between them.
	var exists *redis.IntCmd
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "devredis-test:k", "v", ttl)
		exists = p.Exists(ctx, "devredis-test:k")
		return nil
	}); err != nil {
		t.Fatalf("SET PX: %v", err)
	}
	if exists.Val() != 1 {
		t.Fatalf("key missing right after SET")
	}
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(5 * time.Second)
	for expired := false; !expired; {
		select {
		case <-deadline:
			t.Fatalf("key with PX %v still there after 5s: the TTL clock does not move", ttl)
		case <-poll.C:
			n, err := c.Exists(ctx, "devredis-test:k").Result()
			if err != nil {
				t.Fatalf("EXISTS: %v", err)
			}
			expired = n == 0
		}
	}
	// The ticker advances by real elapsed time, so the key may go at most one
	// tick early, never at once.
	if el := time.Since(start); el < ttl-40*time.Millisecond {
		t.Errorf("key expired after %v, before its PX %v", el, ttl)
	}

	out := stderr.String()
	for _, want := range []string{"WARNING", "IN-MEMORY", "NOTHING IS DURABLE", "LOST when this", "REDIS_URL=redis://", probed} {
		if !strings.Contains(out, want) {
			t.Errorf("warning lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n < 8 {
		t.Errorf("warning has %d lines, want a loud multi-line banner", n)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "IN-MEMORY") {
		t.Errorf("no warning logged: %q", l)
	}
}

// Without the ticker miniredis never expires anything: what the ticker in
// the test above is for.
func TestEmbeddedWithoutTickerNeverExpires(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c, cleanup, err := connect(ctx, nil, options{stderr: &syncBuffer{}})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(cleanup)
	if err := c.Set(ctx, "k", "v", 10*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	<-time.After(200 * time.Millisecond) // an observation window, not a synchronisation
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS = %d, %v; want the key kept (no ticker, no expiry)", n, err)
	}
}

func TestCleanupStopsEmbeddedRedis(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c, cleanup, err := connect(ctx, nil, options{stderr: &syncBuffer{}, tick: time.Millisecond})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	addr := c.(*redis.Client).Options().Addr
	cleanup()
	cleanup() // twice is harmless
	other := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer other.Close()
	if err := other.Ping(ctx).Err(); err == nil {
		t.Fatalf("embedded Redis at %s still answers after cleanup", addr)
	}
}

func TestURLIsUsed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	m := miniredis.RunT(t)
	var stderr syncBuffer
	c, cleanup, err := connect(ctx, nil, options{url: "redis://" + m.Addr() + "/0", probeAddr: closedAddr(t), stderr: &stderr, tick: time.Millisecond})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(cleanup)
	if err := c.Set(ctx, "k", "from-client", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("k"); got != "from-client" {
		t.Errorf("server at REDIS_URL has k=%q, want the client's write", got)
	}
	if stderr.String() != "" {
		t.Errorf("warning printed while using REDIS_URL: %q", stderr.String())
	}
}

// A REDIS_URL that does not answer is an error, even with a Redis on the
// probed address: no fallback.
func TestUnreachableURLFailsWithoutFallback(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	m := miniredis.RunT(t)
	var stderr syncBuffer
	c, cleanup, err := connect(ctx, nil, options{url: "redis://:secret@" + closedAddr(t) + "/0", probeAddr: m.Addr(), stderr: &stderr, tick: time.Millisecond})
	if err == nil {
		cleanup()
		t.Fatalf("connect = %v, nil; want an error", c)
	}
	if c != nil || cleanup != nil {
		t.Errorf("connect returned a client or cleanup with its error")
	}
	if msg := err.Error(); !strings.Contains(msg, "REDIS_URL") || strings.Contains(msg, "secret") {
		t.Errorf("error %q should name REDIS_URL and hide the password", msg)
	}
	if stderr.String() != "" {
		t.Errorf("fell back to the embedded Redis: %q", stderr.String())
	}
}

func TestInvalidURLFails(t *testing.T) {
	t.Parallel()
	_, _, err := connect(testCtx(t), nil, options{url: "http://nope", stderr: &syncBuffer{}})
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Fatalf("connect err = %v, want a REDIS_URL error", err)
	}
}

// A Redis on the probed address (6379 in real use) is used as is.
func TestProbedRedisIsUsed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	m := miniredis.RunT(t)
	var stderr syncBuffer
	c, cleanup, err := connect(ctx, nil, options{probeAddr: m.Addr(), stderr: &stderr, tick: time.Millisecond})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(cleanup)
	if err := c.Set(ctx, "k", "probed", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("k"); got != "probed" {
		t.Errorf("probed server has k=%q, want the client's write", got)
	}
	if stderr.String() != "" {
		t.Errorf("warning printed while a Redis answered: %q", stderr.String())
	}
}

// Connect reads REDIS_URL from the environment.
func TestConnectReadsEnv(t *testing.T) {
	m := miniredis.RunT(t)
	t.Setenv(EnvURL, "redis://"+m.Addr()+"/0")
	ctx := testCtx(t)
	c, cleanup, err := Connect(ctx, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cleanup()
	if err := c.Set(ctx, "k", "env", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("k"); got != "env" {
		t.Errorf("REDIS_URL server has k=%q", got)
	}
}

// Something that is not Redis on the probed address: fall back, and say why.
func TestNonRedisOnProbedAddrFallsBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	var stderr syncBuffer
	c, cleanup, err := connect(ctx, nil, options{probeAddr: l.Addr().String(), stderr: &stderr, tick: time.Millisecond})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(cleanup)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("embedded PING: %v", err)
	}
	if out := stderr.String(); !strings.Contains(out, "IN-MEMORY") || !strings.Contains(out, l.Addr().String()) {
		t.Errorf("want the warning naming the probed address, got %q", out)
	}
}
