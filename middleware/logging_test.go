package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/middleware"
)

// capture is a JSON slog handler's output, one record a line.
type capture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *capture) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// take returns the records written since the last call, and the raw text.
func (c *capture) take(t *testing.T) ([]map[string]any, string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	raw := c.buf.String()
	c.buf.Reset()
	var recs []map[string]any
	for line := range strings.Lines(raw) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("bad record %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs, raw
}

const (
	payloadMarker = "PAYLOAD-MARKER-must-not-be-logged"
	secretHeader  = "SECRET-HEADER-must-not-be-logged"
)

// TestLogging: one Debug record at the start and one at the end (Info on
// success, Warn on error, Error for a panic on its way to Recover, Info for
// a postponed or duplicate run) with the stable keys, the error only on
// failure, listed header values only, and never the payload.
func TestLogging(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	var c capture
	logging := middleware.Logging(c.logger(), &middleware.LoggingOptions{Headers: []string{"correlation-id"}})
	limit, err := middleware.RateLimit(rdb, &middleware.RateLimitConfig{Limit: 1, Period: time.Minute, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	once, err := middleware.Idempotency(rdb, &middleware.IdempotencyConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ok := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil })
	fail := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return errBoom })
	boom := conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { panic("kaput") })
	headers := map[string]string{"correlation-id": "corr-7", "authorization": secretHeader}
	job := func(id, kind string) *conveyor.Job {
		j := newJob(&fakeSettler{}, id, kind, headers)
		j.Payload = []byte(payloadMarker)
		j.Retries, j.Recoveries = 2, 1
		return j
	}
	ctx := context.Background()

	type want struct {
		level, msg, outcome string
		err                 bool
		extra               string // another key the end record must have
	}
	for _, tc := range []struct {
		name string
		h    conveyor.Handler
		want want
	}{
		{"done", logging(ok), want{"INFO", "job done", "done", false, ""}},
		{"failed", logging(fail), want{"WARN", "job failed", "failed", true, ""}},
		{"panicked", middleware.Recover()(logging(boom)), want{"ERROR", "job panicked", "panicked", false, ""}},
		{"postponed", logging(limit(ok)), want{"INFO", "job postponed", "postponed", false, "run_at"}},
		{"duplicate", logging(once(ok)), want{"INFO", "job skipped as duplicate", "duplicate", false, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "job-" + tc.name
			if tc.name == "postponed" || tc.name == "duplicate" {
				// A first run takes the only slot, or marks the key done.
				j := job("first-"+tc.name, "k-"+tc.name)
				j.Headers = map[string]string{middleware.DefaultIdempotencyHeader: "key-1"}
				if err := tc.h.ProcessJob(ctx, j); err != nil {
					t.Fatal(err)
				}
				if recs, _ := c.take(t); recs[1]["outcome"] != "done" {
					t.Fatalf("first run: %v", recs[1])
				}
			}
			j := job(id, "k-"+tc.name)
			if tc.name == "duplicate" {
				j.Headers = map[string]string{middleware.DefaultIdempotencyHeader: "key-1", "correlation-id": "corr-7", "authorization": secretHeader}
			}
			_ = tc.h.ProcessJob(ctx, j)
			recs, raw := c.take(t)
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2:\n%s", len(recs), raw)
			}
			if strings.Contains(raw, payloadMarker) || strings.Contains(raw, secretHeader) {
				t.Fatalf("payload or an unlisted header value logged:\n%s", raw)
			}
			startRec, end := recs[0], recs[1]
			if startRec["level"] != "DEBUG" || startRec["msg"] != "job started" {
				t.Fatalf("start record %v", startRec)
			}
			if end["level"] != tc.want.level || end["msg"] != tc.want.msg || end["outcome"] != tc.want.outcome {
				t.Fatalf("end record %v, want %+v", end, tc.want)
			}
			for _, r := range recs {
				if r["queue"] != "q" || r["kind"] != "k-"+tc.name || r["job_id"] != id ||
					r["attempt"] != float64(3) || r["recoveries"] != float64(1) {
					t.Fatalf("record lacks a stable key: %v", r)
				}
				if h, _ := r["headers"].(map[string]any); h["correlation-id"] != "corr-7" {
					t.Fatalf("listed header missing: %v", r)
				}
			}
			if _, ok := end["duration_ms"].(float64); !ok {
				t.Fatalf("end record without duration_ms: %v", end)
			}
			if _, has := end["error"]; has != tc.want.err {
				t.Fatalf("error key present %v, want %v: %v", has, tc.want.err, end)
			}
			if tc.want.err && end["error"] != "boom" {
				t.Fatalf("error = %v, want boom", end["error"])
			}
			if tc.want.extra != "" {
				if _, has := end[tc.want.extra]; !has {
					t.Fatalf("end record lacks %s: %v", tc.want.extra, end)
				}
			}
		})
	}
}

// TestLoggingWithoutHeaders: no listed headers, no "headers" group.
func TestLoggingWithoutHeaders(t *testing.T) {
	t.Parallel()
	var c capture
	h := middleware.Logging(c.logger(), nil)(conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { return nil }))
	if err := h.ProcessJob(context.Background(), newJob(&fakeSettler{}, "1", "k", map[string]string{"x": secretHeader})); err != nil {
		t.Fatal(err)
	}
	recs, raw := c.take(t)
	if len(recs) != 2 || strings.Contains(raw, secretHeader) || strings.Contains(raw, `"headers"`) {
		t.Fatalf("records:\n%s", raw)
	}
}
