package devredis

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redischeck"
)

// EnvURL names the environment variable that selects the Redis to use.
const EnvURL = "REDIS_URL"

// LocalAddr is tried when EnvURL is not set.
const LocalAddr = "127.0.0.1:6379"

// options are the inputs of connect, separate so tests need neither the
// environment nor the machine's port 6379.
type options struct {
	url       string        // value of REDIS_URL; "" when unset
	probeAddr string        // address tried when url is ""; "" skips the probe
	stderr    io.Writer     // where the in-memory warning goes
	tick      time.Duration // TTL clock step of the embedded Redis; 0 = no ticker (tests only)
}

// Connect returns a client for the examples and a cleanup function that
// closes it (and stops the embedded Redis, if one was started). See the
// package documentation for how the server is chosen. A nil logger logs
// nothing.
//
// Connect also sends go-redis's own log lines (one per failed dial, on
// stderr by default) to logger at debug level, so that an example that
// cannot start says why in one line, its error. go-redis's logger is
// process-global: Connect may set it only because it serves the examples'
// main functions, each a program of its own; library packages never do.
// The first Connect of a process sets it.
func Connect(ctx context.Context, logger *slog.Logger) (redis.UniversalClient, func(), error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	setRedisLogger.Do(func() { redis.SetLogger(debugLog{logger}) })
	return connect(ctx, logger, options{
		url:       os.Getenv(EnvURL),
		probeAddr: LocalAddr,
		stderr:    os.Stderr,
		tick:      50 * time.Millisecond,
	})
}

func connect(ctx context.Context, logger *slog.Logger, o options) (redis.UniversalClient, func(), error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if o.url != "" {
		return connectURL(ctx, logger, o.url)
	}
	var reason error
	if o.probeAddr != "" {
		if reason = probe(ctx, o.probeAddr); reason == nil {
			c := redis.NewClient(&redis.Options{Addr: o.probeAddr})
			logger.Info("devredis: using the local Redis", "addr", o.probeAddr)
			return c, func() { _ = c.Close() }, nil
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("devredis: %w", ctx.Err())
		}
	}
	return embedded(logger, o, reason)
}

// connectURL connects to the Redis raw names. Its errors are one line
// each, for the example to print as is (redischeck.ParseURL,
// redischeck.Unreachable); a server that does not answer is not replaced by
// an in-memory one, and the error says how to get one.
func connectURL(ctx context.Context, logger *slog.Logger, raw string) (redis.UniversalClient, func(), error) {
	opts, err := redischeck.ParseURL(raw, EnvURL)
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("%w; unset %s to run on an embedded in-memory Redis instead",
			redischeck.Unreachable(opts.Addr, EnvURL, err), EnvURL)
	}
	logger.Info("devredis: using the Redis named by "+EnvURL, "url", redact(raw))
	return c, func() { _ = c.Close() }, nil
}

// probe reports why nothing usable answers PING at addr, or nil. Short
// timeouts: an example should start at once when nothing listens. A plain
// dial first, so the common "nothing there" case does not make go-redis log
// its dial retries.
func probe(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second,
		MaxRetries: -1, DialerRetries: 1, PoolSize: 1,
	})
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Ping(pctx).Err()
}

// embedded starts miniredis on a free loopback port.
func embedded(logger *slog.Logger, o options, reason error) (redis.UniversalClient, func(), error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, nil, fmt.Errorf("devredis: start embedded redis: %w", err)
	}
	// miniredis never moves its TTL clock by itself; without this, leases,
	// retention and SET PX keys would live forever.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if o.tick > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(o.tick)
			defer t.Stop()
			last := time.Now()
			for {
				select {
				case <-stop:
					return
				case now := <-t.C:
					m.FastForward(now.Sub(last))
					last = now
				}
			}
		}()
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	why := "REDIS_URL is not set"
	if reason != nil {
		why += fmt.Sprintf(" and nothing usable answers on %s (%v)", o.probeAddr, reason)
	}
	if o.stderr != nil {
		_, _ = io.WriteString(o.stderr, warning(why, m.Addr()))
	}
	logger.Warn("devredis: using an embedded IN-MEMORY Redis; nothing is durable", "addr", m.Addr(), "why", why)
	var once sync.Once
	cleanup := func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			_ = c.Close()
			m.Close()
		})
	}
	return c, cleanup, nil
}

func warning(why, addr string) string {
	const bar = "################################################################################\n"
	return "\n" + bar +
		"##  WARNING: NO REDIS FOUND. USING AN EMBEDDED IN-MEMORY REDIS (miniredis).\n" +
		"##\n" +
		"##  NOTHING IS DURABLE: every job, timer and message is LOST when this\n" +
		"##  process exits. This is for trying the example, not for real work.\n" +
		"##\n" +
		"##  Why: " + why + ".\n" +
		"##  Embedded Redis listens on " + addr + " while this process runs.\n" +
		"##\n" +
		"##  To use a real Redis, start one on 127.0.0.1:6379, e.g.\n" +
		"##      redis-server --save '' --appendonly no\n" +
		"##  or point REDIS_URL at yours:\n" +
		"##      REDIS_URL=redis://host:6379/0 go run ./examples/...\n" +
		bar + "\n"
}

// setRedisLogger makes the first Connect of a process the one that sets
// go-redis's logger: setting it races with clients that log.
var setRedisLogger sync.Once

// debugLog is go-redis's logger for the examples: its lines go to an
// slog.Logger at debug level.
type debugLog struct{ l *slog.Logger }

func (d debugLog) Printf(ctx context.Context, format string, v ...any) {
	d.l.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
