package stream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// env is one test's driver on its own key prefix.
type env struct {
	t      *testing.T
	rdb    redis.UniversalClient
	prefix string
	d      *stream.Driver
	logs   *logRecorder
}

func newEnv(t *testing.T, cfg *stream.Config) *env {
	t.Helper()
	return newEnvWith(t, redistest.Client(t), cfg)
}

func newEnvWith(t *testing.T, rdb redis.UniversalClient, cfg *stream.Config) *env {
	t.Helper()
	e := &env{t: t, rdb: rdb, prefix: redistest.Prefix(t), logs: &logRecorder{}}
	var c stream.Config
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = e.prefix
	c.Logger = slog.New(e.logs)
	d, err := stream.New(rdb, &c)
	if err != nil {
		t.Fatalf("stream.New: %v", err)
	}
	e.d = d
	return e
}

// open opens a consumer that is closed when the test ends.
func (e *env) open(queue string, vt time.Duration) broker.Consumer {
	e.t.Helper()
	c, err := e.d.Open(context.Background(), queue, &broker.ConsumerOptions{VisibilityTimeout: vt})
	if err != nil {
		e.t.Fatalf("Open(%q): %v", queue, err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func (e *env) enqueue(msgs ...*broker.Message) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.d.Enqueue(ctx, msgs); err != nil {
		e.t.Fatalf("Enqueue: %v", err)
	}
}

// fetch fetches with a deadline and fails the test on error.
func (e *env) fetch(c broker.Consumer, max int) []*broker.Delivery {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := c.Fetch(ctx, max)
	if err != nil {
		e.t.Fatalf("Fetch: %v", err)
	}
	if len(ds) == 0 || len(ds) > max {
		e.t.Fatalf("Fetch(%d) returned %d deliveries", max, len(ds))
	}
	return ds
}

func (e *env) key(queue, part string) string {
	return e.prefix + ":{" + queue + "}:" + part
}

func (e *env) keys() []string {
	e.t.Helper()
	return redistest.Keys(e.t, e.rdb, e.prefix)
}

// pending returns the PEL entry of id: owner and delivery count.
func (e *env) pending(queue, id string) (owner string, count int64, idle time.Duration, ok bool) {
	e.t.Helper()
	p, err := e.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: e.key(queue, "stream"), Group: "conveyor", Start: id, End: id, Count: 1,
	}).Result()
	if err != nil {
		e.t.Fatalf("XPENDING: %v", err)
	}
	if len(p) == 0 {
		return "", 0, 0, false
	}
	return p[0].Consumer, p[0].RetryCount, p[0].Idle, true
}

func msg(queue, id string) *broker.Message {
	return &broker.Message{ID: id, Kind: "test", Queue: queue, Payload: []byte("payload of " + id)}
}

func ids(ds []*broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "cvt-client-" + hex.EncodeToString(b[:])
}

// namedClient returns a client of its own whose connections carry name, so a
// test can see in CLIENT LIST when one of them blocks.
func namedClient(t *testing.T, name string) redis.UniversalClient {
	t.Helper()
	redistest.Client(t)
	opts, _, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	opts.ClientName = name
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitBlocked waits until a connection named name is blocked in cmd.
func waitBlocked(t *testing.T, rdb redis.UniversalClient, name, cmd string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var lists []string
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			var mu sync.Mutex
			_ = cc.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
				s, err := n.ClientList(ctx).Result()
				mu.Lock()
				lists = append(lists, s)
				mu.Unlock()
				return err
			})
		} else {
			s, err := rdb.ClientList(context.Background()).Result()
			if err != nil {
				t.Fatalf("CLIENT LIST: %v", err)
			}
			lists = append(lists, s)
		}
		for _, s := range lists {
			for line := range strings.SplitSeq(s, "\n") {
				if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " cmd="+cmd+" ") &&
					strings.Contains(line, " flags=b ") {
					return
				}
			}
		}
		// Polling CLIENT LIST is the only way to observe the server side
		// state; a short pause keeps it from hammering the server.
		<-time.After(2 * time.Millisecond)
	}
	t.Fatalf("no connection %s blocked in %s within 5s", name, cmd)
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// find returns the text of the first record at level whose message contains
// substr, with its attributes, or "".
func (l *logRecorder) find(level slog.Level, substr string) string {
	return l.findWith(level, substr, "")
}

// findWith is find of a record whose text with its attributes also
// contains attr.
func (l *logRecorder) findWith(level slog.Level, substr, attr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if r.Level == level && strings.Contains(r.Message, substr) {
			var b strings.Builder
			b.WriteString(r.Message)
			r.Attrs(func(a slog.Attr) bool {
				b.WriteString(" " + a.String())
				return true
			})
			if strings.Contains(b.String(), attr) {
				return b.String()
			}
		}
	}
	return ""
}
