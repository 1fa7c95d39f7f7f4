package otelconveyor_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/contrib/otelconveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

const queue = "q"

// spans records ended spans and signals each end, so that tests wait for
// spans rather than sleep.
type spans struct {
	*tracetest.SpanRecorder
	mu    sync.Mutex
	ended chan struct{}
}

func newSpans() *spans {
	return &spans{SpanRecorder: tracetest.NewSpanRecorder(), ended: make(chan struct{}, 1000)}
}

func (s *spans) OnEnd(sp sdktrace.ReadOnlySpan) {
	s.SpanRecorder.OnEnd(sp)
	s.ended <- struct{}{}
}

// wait returns the ended spans once there are n, failing t after 20s.
func (s *spans) wait(t *testing.T, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		if got := s.Ended(); len(got) >= n {
			return got
		}
		select {
		case <-s.ended:
		case <-deadline.C:
			t.Fatalf("%d spans ended, want %d: %v", len(s.Ended()), n, names(s.Ended()))
		}
	}
}

func names(ss []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name())
	}
	return out
}

func provider(s *spans) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s), sdktrace.WithSampler(sdktrace.AlwaysSample()))
}

// side is one process's view: its own Redis connection and driver.
func side(t *testing.T, drv drivertest.Driver, prefix string) (redis.UniversalClient, broker.Driver) {
	rdb := redistest.NewClient(t)
	return rdb, drv.Must(t, rdb, prefix)
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func wantAttrs(t *testing.T, what string, got []attribute.KeyValue, want map[string]any) {
	t.Helper()
	m := attrs(got)
	for k, v := range want {
		a, ok := m[attribute.Key(k)]
		if !ok {
			t.Errorf("%s: attribute %s missing (have %v)", what, k, got)
			continue
		}
		if a.Emit() != attribute.StringValue(anyString(v)).Emit() {
			t.Errorf("%s: %s = %s, want %v", what, k, a.Emit(), v)
		}
	}
}

func anyString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return attribute.IntValue(x).Emit()
	}
	panic("unsupported")
}

func spanOfKind(t *testing.T, ss []sdktrace.ReadOnlySpan, k trace.SpanKind) []sdktrace.ReadOnlySpan {
	t.Helper()
	var out []sdktrace.ReadOnlySpan
	for _, s := range ss {
		if s.SpanKind() == k {
			out = append(out, s)
		}
	}
	return out
}

// tracedClient returns a client of d on queue whose enqueues tel traces.
func tracedClient(t *testing.T, d broker.Driver, tel *otelconveyor.Instrumentation) *conveyor.Client {
	t.Helper()
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue,
		Middleware: []conveyor.EnqueueMiddleware{tel.EnqueueMiddleware()}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run starts a pool on d with tel's middleware first. With a non-nil
// startup, the pool runs inside a span of it, as a program that traces its
// start-up would: process spans must not join that span's trace.
func run(t *testing.T, d broker.Driver, tel *otelconveyor.Instrumentation, h conveyor.HandlerFunc, cfg worker.Config, startup ...trace.TracerProvider) {
	t.Helper()
	cfg.Queue = queue
	cfg.Middleware = append([]conveyor.Middleware{tel.Middleware()}, cfg.Middleware...)
	p, err := worker.NewPool(d, h, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Background(t, func(ctx context.Context) error {
		for _, tp := range startup {
			var span trace.Span
			ctx, span = tp.Tracer("app").Start(ctx, "startup")
			defer span.End()
		}
		return p.Run(ctx)
	})
}

// TestProducerAndConsumerSpans: one enqueue through one Client and its run
// in a Pool of another "process" (its own connection, driver and tracer
// provider) give a PRODUCER and a CONSUMER span, joined by a link (or as
// parent and child with Config.ChildSpans), with the messaging attributes.
func TestProducerAndConsumerSpans(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		for _, child := range []bool{false, true} {
			name := drv.Name + "/link"
			if child {
				name = drv.Name + "/child"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				_, pd := side(t, drv, prefix)
				_, cd := side(t, drv, prefix)
				prodSpans, consSpans := newSpans(), newSpans()
				prodTel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: provider(prodSpans)})
				if err != nil {
					t.Fatal(err)
				}
				consTP := provider(consSpans)
				consTel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: consTP, ChildSpans: child})
				if err != nil {
					t.Fatal(err)
				}
				client := tracedClient(t, pd, prodTel)
				m, err := client.Enqueue(context.Background(), "email", []byte(`{"to":"x"}`), nil)
				if err != nil {
					t.Fatal(err)
				}
				run(t, cd, consTel, func(ctx context.Context, job *conveyor.Job) error {
					if !trace.SpanContextFromContext(ctx).IsValid() {
						return errors.New("handler context has no span")
					}
					return nil
				}, worker.Config{}, consTP)

				prod := prodSpans.wait(t, 1)[0]
				cons := consSpans.wait(t, 1)[0]
				if prod.SpanKind() != trace.SpanKindProducer || prod.Name() != "send "+queue {
					t.Errorf("producer span %q kind %v, want %q PRODUCER", prod.Name(), prod.SpanKind(), "send "+queue)
				}
				wantAttrs(t, "producer", prod.Attributes(), map[string]any{
					"messaging.system": "conveyor", "messaging.operation.name": "send",
					"messaging.operation.type": "send", "messaging.destination.name": queue,
					"messaging.message.id": m.ID, "conveyor.job.kind": "email",
				})
				if cons.SpanKind() != trace.SpanKindConsumer || cons.Name() != "process "+queue {
					t.Errorf("consumer span %q kind %v, want %q CONSUMER", cons.Name(), cons.SpanKind(), "process "+queue)
				}
				want := map[string]any{
					"messaging.system": "conveyor", "messaging.operation.name": "process",
					"messaging.operation.type": "process", "messaging.destination.name": queue,
					"messaging.message.id": m.ID, "conveyor.job.kind": "email",
					"conveyor.job.attempt": 1, "conveyor.job.outcome": "acked",
				}
				group, hasGroup := attrs(cons.Attributes())["messaging.consumer.group.name"]
				if drv.Name == "stream" {
					want["messaging.consumer.group.name"] = "conveyor"
				} else if hasGroup {
					t.Errorf("list driver span has a consumer group %v", group.Emit())
				}
				wantAttrs(t, "consumer", cons.Attributes(), want)
				if cons.Status().Code == codes.Error {
					t.Errorf("consumer span status %v %q", cons.Status().Code, cons.Status().Description)
				}
				psc := prod.SpanContext()
				if child {
					if cons.Parent().SpanID() != psc.SpanID() || cons.SpanContext().TraceID() != psc.TraceID() {
						t.Errorf("consumer parent %v trace %v, want the producer span %v", cons.Parent().SpanID(), cons.SpanContext().TraceID(), psc.SpanID())
					}
					if len(cons.Links()) != 0 {
						t.Errorf("child consumer span has links %v", cons.Links())
					}
					return
				}
				if len(cons.Links()) != 1 || cons.Links()[0].SpanContext.SpanID() != psc.SpanID() {
					t.Fatalf("consumer links %v, want one to the producer span %v", cons.Links(), psc)
				}
				if cons.Links()[0].SpanContext.TraceID() != psc.TraceID() {
					t.Errorf("link trace %v, want %v", cons.Links()[0].SpanContext.TraceID(), psc.TraceID())
				}
				if cons.Parent().IsValid() {
					t.Errorf("linked consumer span has a parent %v", cons.Parent())
				}
			})
		}
	}
}

// TestRetriedJobSpans: a job that fails twice and then succeeds gives one
// process span per run, each linked to the one producer span: the failed
// runs carry the error status, error.type and a retry event.
func TestRetriedJobSpans(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			_, d := side(t, drv, prefix)
			rec := newSpans()
			tel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: provider(rec)})
			if err != nil {
				t.Fatal(err)
			}
			client := tracedClient(t, d, tel)
			if _, err := client.Enqueue(context.Background(), "flaky", nil, nil); err != nil {
				t.Fatal(err)
			}
			errFlaky := errors.New("upstream 503")
			run(t, d, tel, func(ctx context.Context, job *conveyor.Job) error {
				if job.Retries < 2 {
					return errFlaky
				}
				return nil
			}, worker.Config{Retry: &retry.Rules{Policy: retry.Constant(10 * time.Millisecond)}})

			all := rec.wait(t, 4)
			prod := spanOfKind(t, all, trace.SpanKindProducer)
			runs := spanOfKind(t, all, trace.SpanKindConsumer)
			if len(prod) != 1 || len(runs) != 3 {
				t.Fatalf("%d producer and %d consumer spans, want 1 and 3: %v", len(prod), len(runs), names(all))
			}
			// In the order the runs started: a span is recorded when it
			// ends, and a run's span may end after the next run's (its
			// retry was stored, then its goroutine descheduled).
			slices.SortFunc(runs, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
			for n, s := range runs {
				a := attrs(s.Attributes())
				if got := a["conveyor.job.attempt"].AsInt64(); got != int64(n+1) {
					t.Errorf("run %d: attempt %d", n, got)
				}
				if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != prod[0].SpanContext().SpanID() {
					t.Errorf("run %d: links %v, want the producer span", n, s.Links())
				}
				var events []string
				for _, e := range s.Events() {
					events = append(events, e.Name)
				}
				if n < 2 {
					if s.Status().Code != codes.Error || s.Status().Description != "upstream 503" {
						t.Errorf("run %d: status %v %q, want Error %q", n, s.Status().Code, s.Status().Description, "upstream 503")
					}
					if a["error.type"].AsString() != "*errors.errorString" || a["conveyor.job.outcome"].AsString() != "retried" {
						t.Errorf("run %d: error.type %q outcome %q", n, a["error.type"].AsString(), a["conveyor.job.outcome"].AsString())
					}
					if len(events) != 1 || events[0] != "conveyor.job.retry" {
						t.Errorf("run %d: events %v, want one conveyor.job.retry", n, events)
					}
					continue
				}
				if s.Status().Code == codes.Error || a["conveyor.job.outcome"].AsString() != "acked" || len(events) != 0 {
					t.Errorf("last run: status %v outcome %q events %v", s.Status().Code, a["conveyor.job.outcome"].AsString(), events)
				}
			}
		})
	}
}

// TestNoErrorText: with Config.NoErrorText a failed run's span carries the
// error's type, not its message, and its discard event no reason; the
// message (which may quote user data) reaches no span.
func TestNoErrorText(t *testing.T) {
	t.Parallel()
	drv := drivertest.Durable[0]
	_, d := side(t, drv, redistest.Prefix(t))
	rec := newSpans()
	tel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: provider(rec), NoErrorText: true})
	if err != nil {
		t.Fatal(err)
	}
	client := tracedClient(t, d, tel)
	if _, err := client.Enqueue(context.Background(), "charge", nil, nil); err != nil {
		t.Fatal(err)
	}
	const secret = "card 4242 declined"
	run(t, d, tel, func(ctx context.Context, job *conveyor.Job) error {
		return conveyor.SkipRetry(errors.New(secret))
	}, worker.Config{Logger: slog.New(slog.DiscardHandler)})

	runs := spanOfKind(t, rec.wait(t, 2), trace.SpanKindConsumer)
	if len(runs) != 1 {
		t.Fatalf("%d consumer spans, want 1", len(runs))
	}
	s := runs[0]
	a := attrs(s.Attributes())
	et := a["error.type"].AsString()
	if s.Status().Code != codes.Error || et == "" || s.Status().Description != et {
		t.Errorf("status %v %q, want Error with the error.type %q", s.Status().Code, s.Status().Description, et)
	}
	if a["conveyor.job.outcome"].AsString() != "discarded" {
		t.Errorf("outcome %q, want discarded", a["conveyor.job.outcome"].AsString())
	}
	var discards int
	for _, e := range s.Events() {
		if e.Name != "conveyor.job.discard" {
			continue
		}
		discards++
		if r := attrs(e.Attributes)["conveyor.job.discard_reason"].AsString(); r != "" {
			t.Errorf("discard reason %q, want none", r)
		}
	}
	if discards != 1 {
		t.Errorf("%d discard events, want 1", discards)
	}
	if dump := dumpSpans(rec.Ended()); strings.Contains(dump, "4242") {
		t.Errorf("a span holds the error message: %s", dump)
	}
}
