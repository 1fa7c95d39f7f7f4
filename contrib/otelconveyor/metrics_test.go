package otelconveyor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/contrib/otelconveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/middleware"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

// marker is the payload of every job of the workload: no span, metric or
// log line may contain it.
const marker = "PAYLOAD-MARKER-7f3a9c"

// loseLease removes every in-flight job of queue from Redis, as if another
// worker had taken them over and finished them, so that the pool's next
// heartbeat finds its leases lost.
func loseLease(t *testing.T, rdb redis.UniversalClient, driver, prefix string) {
	t.Helper()
	ctx := context.Background()
	k := keys.Queue(prefix, queue)
	switch driver {
	case "list":
		if err := rdb.Del(ctx, k.Part("lease")).Err(); err != nil {
			t.Fatal(err)
		}
	case "stream":
		ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.Part("stream"), Group: "conveyor", Start: "-", End: "+", Count: 100}).Result()
		if err != nil || len(ps) == 0 {
			t.Fatalf("XPENDING: %v (%d pending)", err, len(ps))
		}
		for _, p := range ps {
			if err := rdb.XAck(ctx, k.Part("stream"), "conveyor", p.ID).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.XDel(ctx, k.Part("stream"), p.ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestMetricsAndOutcomes runs a known workload through an instrumented
// client and pool and checks every instrument, the spans' outcome events,
// and that the marker payload reaches no span, metric or log line.
func TestMetricsAndOutcomes(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			rdb, d := side(t, drv, prefix)
			rec := newSpans()
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			tel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: provider(rec), MeterProvider: mp})
			if err != nil {
				t.Fatal(err)
			}
			logs := &drivertest.Buffer{}
			logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			client := tracedClient(t, d, tel)
			logging := middleware.Logging(logger, nil)
			stuck := make(chan struct{}, 1)
			var postponed sync.Map
			run(t, d, tel, func(ctx context.Context, job *conveyor.Job) error {
				switch job.Kind {
				case "postponed":
					if _, again := postponed.LoadOrStore(job.ID, true); !again {
						return job.Postpone(ctx, time.Now().Add(50*time.Millisecond))
					}
				case "flaky":
					if job.Retries == 0 {
						return errors.New("flaky failure")
					}
				case "bad":
					// Long enough to be cut, with a 2-byte character across
					// the cut: what spans carry must stay valid UTF-8.
					return conveyor.SkipRetry(errors.New(strings.Repeat("a", 1023) + "é bad input"))
				case "stuck":
					stuck <- struct{}{}
					<-ctx.Done()
					return context.Cause(ctx)
				}
				return nil
			}, worker.Config{
				Retry:             &retry.Rules{Policy: retry.Constant(10 * time.Millisecond)},
				Logger:            logger,
				Middleware:        []conveyor.Middleware{logging},
				OnPromote:         tel.OnPromote,
				VisibilityTimeout: 600 * time.Millisecond,
				HeartbeatInterval: 100 * time.Millisecond,
			})

			ctx := context.Background()
			payload := []byte(`{"secret":"` + marker + `"}`)
			var reqs []conveyor.Request
			for _, kind := range []string{"ok", "ok", "ok", "flaky", "bad", "postponed"} {
				reqs = append(reqs, conveyor.Request{Kind: kind, Args: payload})
			}
			reqs = append(reqs, conveyor.Request{Kind: "later", Args: payload, Opts: &conveyor.EnqueueOptions{Delay: 150 * time.Millisecond}})
			if _, err := client.EnqueueMany(ctx, reqs...); err != nil {
				t.Fatal(err)
			}
			// 1 send span, then 9 runs: 3 ok, flaky twice, bad, later,
			// postponed twice.
			rec.wait(t, 10)
			if _, err := client.Enqueue(ctx, "stuck", payload, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case <-stuck:
			case <-time.After(20 * time.Second):
				t.Fatal("the stuck job never started")
			}
			loseLease(t, rdb, drv.Name, prefix)
			spans := rec.wait(t, 12)

			// Jobs in another queue, for the depth gauge: 2 ready, 1 delayed.
			other, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "other"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := other.EnqueueMany(ctx, conveyor.Request{Kind: "x"}, conveyor.Request{Kind: "x"},
				conveyor.Request{Kind: "x", Opts: &conveyor.EnqueueOptions{Delay: time.Hour}}); err != nil {
				t.Fatal(err)
			}
			reg, err := tel.ObserveQueues(d)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = reg.Unregister() }()

			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				t.Fatal(err)
			}
			got := map[string]metricdata.Aggregation{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					got[m.Name] = m.Data
				}
			}
			sum := func(name string) int64 {
				s, ok := got[name].(metricdata.Sum[int64])
				if !ok {
					t.Errorf("%s: no int64 sum (%T)", name, got[name])
					return -1
				}
				var n int64
				for _, p := range s.DataPoints {
					n += p.Value
				}
				return n
			}
			count := func(name string) uint64 {
				h, ok := got[name].(metricdata.Histogram[float64])
				if !ok {
					t.Errorf("%s: no histogram (%T)", name, got[name])
					return 0
				}
				var n uint64
				for _, p := range h.DataPoints {
					n += p.Count
					if p.Sum < 0 {
						t.Errorf("%s: negative sum %v", name, p.Sum)
					}
				}
				return n
			}
			for name, want := range map[string]int64{
				// The postponed run is not processed; its second run is.
				otelconveyor.MetricSent: 8, otelconveyor.MetricProcessed: 9, otelconveyor.MetricFailed: 3,
				otelconveyor.MetricRetried: 1, otelconveyor.MetricDiscarded: 1, otelconveyor.MetricLeaseLost: 1,
			} {
				if n := sum(name); n != want {
					t.Errorf("%s = %d, want %d", name, n, want)
				}
			}
			if n := count(otelconveyor.MetricDuration); n != 9 {
				t.Errorf("%s has %d runs, want 9", otelconveyor.MetricDuration, n)
			}
			if n := count(otelconveyor.MetricQueueWait); n != 8 {
				t.Errorf("%s has %d first runs, want 8", otelconveyor.MetricQueueWait, n)
			}
			if n := count(otelconveyor.MetricLateness); n < 1 {
				t.Errorf("%s has %d promotions, want at least 1", otelconveyor.MetricLateness, n)
			}
			depth := map[string]int64{}
			if g, ok := got[otelconveyor.MetricDepth].(metricdata.Gauge[int64]); ok {
				for _, p := range g.DataPoints {
					q, _ := p.Attributes.Value("messaging.destination.name")
					st, _ := p.Attributes.Value(otelconveyor.StateKey)
					depth[q.AsString()+"/"+st.AsString()] = p.Value
				}
			}
			for k, want := range map[string]int64{
				"q/ready": 0, "q/in_flight": 0, "q/delayed": 0, "q/discarded": 1,
				"other/ready": 2, "other/in_flight": 0, "other/delayed": 1, "other/discarded": 0,
			} {
				if n, ok := depth[k]; !ok || n != want {
					t.Errorf("depth %s = %d (reported %v), want %d; all: %v", k, n, ok, want, depth)
				}
			}

			outcomes := map[string]int{}
			events := map[string]int{}
			for _, s := range spans {
				for _, kv := range s.Attributes() {
					if kv.Key == otelconveyor.OutcomeKey {
						outcomes[kv.Value.AsString()]++
					}
				}
				for _, e := range s.Events() {
					events[e.Name]++
				}
			}
			wantOutcomes := map[string]int{"acked": 6, "retried": 1, "discarded": 1, "lease_lost": 1, "postponed": 1}
			if fmt.Sprint(outcomes) != fmt.Sprint(wantOutcomes) {
				t.Errorf("outcomes %v, want %v", outcomes, wantOutcomes)
			}
			wantEvents := map[string]int{"conveyor.job.retry": 1, "conveyor.job.discard": 1, "conveyor.job.lease_lost": 1, "conveyor.job.postpone": 1}
			if fmt.Sprint(events) != fmt.Sprint(wantEvents) {
				t.Errorf("events %v, want %v", events, wantEvents)
			}

			dump := dumpSpans(spans)
			if !utf8.ValidString(dump) || !strings.Contains(dump, "aaaa…") {
				t.Errorf("span text is not valid UTF-8 or the long error was not cut: %q", dump)
			}
			// No payload bytes anywhere: spans, metrics, logs.
			if strings.Contains(dump, marker) {
				t.Errorf("a span holds the payload marker")
			}
			mj, err := json.Marshal(rm)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(mj, []byte(marker)) {
				t.Errorf("a metric holds the payload marker")
			}
			if strings.Contains(logs.String(), marker) {
				t.Errorf("a log line holds the payload marker")
			}
			if !strings.Contains(logs.String(), `"kind":"flaky"`) || len(mj) < 1000 {
				t.Errorf("the search found too little to search: %d log bytes, %d metric bytes", len(logs.String()), len(mj))
			}
		})
	}
}

// dumpSpans renders everything a span exporter would send.
func dumpSpans(ss []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	kv := func(attrs []attribute.KeyValue) {
		for _, a := range attrs {
			fmt.Fprintf(&b, "%s=%s ", a.Key, a.Value.Emit())
		}
	}
	for _, s := range ss {
		fmt.Fprintf(&b, "%s %s %s %q ", s.Name(), s.SpanKind(), s.Status().Code, s.Status().Description)
		kv(s.Attributes())
		for _, e := range s.Events() {
			b.WriteString(e.Name + " ")
			kv(e.Attributes)
		}
		for _, l := range s.Links() {
			kv(l.Attributes)
		}
		kv(s.Resource().Attributes())
		b.WriteString("\n")
	}
	return b.String()
}

// TestSentCountsRefusals: when an EnqueueMany call stores some jobs and the
// driver refuses others, messaging.client.sent.messages counts the stored
// ones without error.type and only the refused one with it.
func TestSentCountsRefusals(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			_, d := side(t, drv, redistest.Prefix(t))
			reader := sdkmetric.NewManualReader()
			tel, err := otelconveyor.New(&otelconveyor.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
			if err != nil {
				t.Fatal(err)
			}
			client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue,
				Middleware: []conveyor.EnqueueMiddleware{tel.EnqueueMiddleware()}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			timer := &conveyor.EnqueueOptions{ID: "dup", Delay: time.Hour}
			if _, err := client.Enqueue(ctx, "a", nil, timer); err != nil {
				t.Fatal(err)
			}
			_, err = client.EnqueueMany(ctx, conveyor.Request{Kind: "a"}, conveyor.Request{Kind: "a", Opts: timer})
			if !errors.Is(err, conveyor.ErrDuplicate) {
				t.Fatalf("EnqueueMany with a pending timer's ID: %v, want ErrDuplicate", err)
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(ctx, &rm); err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != otelconveyor.MetricSent {
						continue
					}
					for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
						et, _ := p.Attributes.Value("error.type")
						got[et.AsString()] += p.Value
					}
				}
			}
			want := map[string]int64{"": 2, "*broker.DuplicateError": 1}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("sent by error.type %v, want %v", got, want)
			}
		})
	}
}
