// Command tracing shows Conveyor's OpenTelemetry instrumentation
// (contrib/otelconveyor) end to end: a "checkout" span enqueues three jobs,
// each in a PRODUCER span "send orders"; a worker pool runs them, each run
// in a CONSUMER span "process orders" linked to the span that sent it. One
// job succeeds, one fails once and is retried (two process spans), one is
// delayed by 200ms.
//
//	go run ./examples/tracing                       # spans to stdout, pretty JSON
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 go run ./examples/tracing
//	go run ./examples/tracing -driver=stream -child # stream driver, one trace
//
// Spans go over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the exporter reads the other
// OTEL_EXPORTER_OTLP_* variables too), to stdout otherwise. It uses
// REDIS_URL, else a Redis on 127.0.0.1:6379, else an embedded in-memory
// Redis (with a loud warning), and deletes the keys it made before it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/contrib/otelconveyor"
	"github.com/conveyorq/conveyor/examples/internal/devredis"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

// serviceName is the service.name of every span the example exports.
const serviceName = "conveyor-tracing-example"

// queue is where the example's jobs go; its spans are "send orders" and
// "process orders".
const queue = "orders"

// tracerName is the instrumentation scope of the example's own spans.
const tracerName = "github.com/conveyorq/conveyor/examples/tracing"

// The environment variables that send spans over OTLP/HTTP, as the
// exporter reads them.
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

func main() {
	driver := flag.String("driver", "list", "queue driver: list or stream")
	child := flag.Bool("child", false, "make process spans children of the send spans (one trace) instead of linking them")
	stdout := flag.Bool("stdout", false, "print spans to stdout even when "+envEndpoint+" is set")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb, cleanup, err := devredis.Connect(ctx, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
	err = run(ctx, config{
		Redis: rdb, Driver: *driver, ChildSpans: *child, Stdout: *stdout,
		Out: os.Stdout, Logger: logger,
	})
	cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
}

// config is what run needs; main fills it from flags, tests directly.
type config struct {
	// Redis holds the queue. Required.
	Redis redis.UniversalClient
	// Driver is "list" or "stream". Defaults to "list".
	Driver string
	// ChildSpans makes each process span a child of its send span
	// (otelconveyor.Config.ChildSpans) instead of linking to it.
	ChildSpans bool
	// OTLPEndpoint, when set, is the OTLP/HTTP URL spans are posted to,
	// path included (http://localhost:4318/v1/traces); it wins over the
	// environment. Defaults to the environment's choice.
	OTLPEndpoint string
	// Stdout prints spans even when the environment names an OTLP endpoint.
	Stdout bool
	// Out receives the progress lines and the summary. Defaults to
	// io.Discard.
	Out io.Writer
	// SpanOut receives the spans when they are printed. Defaults to Out.
	SpanOut io.Writer
	// Logger receives the driver's and pool's logs. Defaults to discarding
	// them.
	Logger *slog.Logger
	// Delay is how long the delayed job waits. Defaults to 200ms.
	Delay time.Duration
	// RetryDelay is how long the failed job waits before its second run.
	// Defaults to 100ms.
	RetryDelay time.Duration
	// Timeout bounds the wait for the jobs. Defaults to 30s.
	Timeout time.Duration
	// Prefix starts every key the run makes; they are all deleted at the
	// end. Defaults to "tracing-demo-<unique run ID>".
	Prefix string
}

func (c config) withDefaults() (config, error) {
	if c.Redis == nil {
		return c, errors.New("config: no Redis")
	}
	if c.Driver == "" {
		c.Driver = "list"
	}
	if c.Driver != "list" && c.Driver != "stream" {
		return c, fmt.Errorf("config: driver %q: want list or stream", c.Driver)
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.SpanOut == nil {
		c.SpanOut = c.Out
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Delay == 0 {
		c.Delay = 200 * time.Millisecond
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 100 * time.Millisecond
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	return c, nil
}

// run sets up tracing and metrics, plays the checkout, and shuts the
// providers down so that every span is exported before it returns.
func run(ctx context.Context, cfg config) (err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return err
	}
	out := &syncWriter{w: cfg.Out} // handlers print from their own goroutines
	if cfg.SpanOut == cfg.Out {
		cfg.SpanOut = out
	}

	res, err := resource.New(ctx,
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, but service.name below wins
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(serviceName)),
	)
	if err != nil {
		return fmt.Errorf("resource: %w", err)
	}
	exp, dest, err := newExporter(ctx, cfg)
	if err != nil {
		return err
	}
	counted := &countingExporter{SpanExporter: exp}
	ended := &endCounter{}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(ended),
		sdktrace.WithBatcher(counted),
	)
	// Metrics stay in process: a manual reader collected once at the end
	// feeds the summary. A program exporting them would use a
	// PeriodicReader with an OTLP metric exporter instead.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))

	var metricsLine string
	defer func() {
		// Shutdown flushes: without it the batcher would drop the spans
		// still queued when the process exits. It runs on the error paths
		// too, so a failed run still exports what it traced.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		errs := &multierror.Error{ErrorFormat: joinErrors}
		if err != nil {
			errs = multierror.Append(errs, err)
		}
		if e := tp.Shutdown(sctx); e != nil {
			errs = multierror.Append(errs, fmt.Errorf("trace provider shutdown (spans may be lost): %w", e))
		}
		if e := mp.Shutdown(sctx); e != nil {
			errs = multierror.Append(errs, fmt.Errorf("meter provider shutdown: %w", e))
		}
		if errs.ErrorOrNil() == nil {
			fmt.Fprintf(out, "spans: %d ended, %d exported to %s\n", ended.n.Load(), counted.n.Load(), dest)
			fmt.Fprintln(out, metricsLine)
			// The batcher hands export errors to the global error
			// handler (which logs them) rather than to Shutdown.
			if n, all := counted.n.Load(), ended.n.Load(); n < all {
				errs = multierror.Append(errs, fmt.Errorf("%d of %d spans exported to %s (see the exporter's error above)", n, all, dest))
			}
		}
		err = errs.ErrorOrNil()
	}()

	tel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: tp, MeterProvider: mp, ChildSpans: cfg.ChildSpans})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "tracing: %s driver, spans to %s\n", cfg.Driver, dest)
	metricsLine, err = checkout(ctx, cfg, out, tp.Tracer(tracerName), tel, reader)
	return err
}

// newExporter picks where spans go: the configured endpoint, else the
// environment's OTLP endpoint, else stdout. It also names the choice.
func newExporter(ctx context.Context, cfg config) (sdktrace.SpanExporter, string, error) {
	if cfg.Stdout || (cfg.OTLPEndpoint == "" && os.Getenv(envEndpoint) == "" && os.Getenv(envTracesEndpoint) == "") {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(cfg.SpanOut), stdouttrace.WithPrettyPrint())
		if err != nil {
			return nil, "", fmt.Errorf("stdout exporter: %w", err)
		}
		return exp, "stdout", nil
	}
	var opts []otlptracehttp.Option
	dest := "OTLP/HTTP " + os.Getenv(envTracesEndpoint)
	switch {
	case cfg.OTLPEndpoint != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint))
		dest = "OTLP/HTTP " + cfg.OTLPEndpoint
	case os.Getenv(envTracesEndpoint) == "":
		// The exporter appends /v1/traces to the generic endpoint itself.
		dest = "OTLP/HTTP " + strings.TrimSuffix(os.Getenv(envEndpoint), "/") + "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("OTLP/HTTP exporter: %w", err)
	}
	return exp, dest, nil
}

// The jobs of the checkout. Their payloads carry an e-mail address that
// must never reach a span (contrib/otelconveyor keeps payloads out).
const (
	kindEmail    = "email.send"
	kindPayment  = "payment.capture"
	kindReminder = "reminder.send"
)

type orderArgs struct {
	OrderID string `json:"order_id"`
	Email   string `json:"email"`
}

// checkout enqueues the jobs inside an app span, runs a pool until each
// has succeeded, and returns the metrics summary line.
func checkout(ctx context.Context, cfg config, out io.Writer, tracer trace.Tracer, tel *otelconveyor.Instrumentation, reader sdkmetric.Reader) (string, error) {
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	if cfg.Prefix == "" {
		cfg.Prefix = "tracing-demo-" + runID
	}
	defer cleanupKeys(context.WithoutCancel(ctx), cfg.Redis, cfg.Prefix)

	d, err := newDriver(cfg)
	if err != nil {
		return "", err
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{
		DefaultQueue: queue,
		Middleware:   []conveyor.EnqueueMiddleware{tel.EnqueueMiddleware()},
	})
	if err != nil {
		return "", err
	}

	succeeded := make(chan string, 3)
	enqueued := map[string]time.Time{} // by kind; written before the pool starts
	mux := worker.NewMux()
	worker.HandleJSON(mux, kindEmail, func(ctx context.Context, job *conveyor.Job, a orderArgs) error {
		fmt.Fprintf(out, "%-16s attempt %d: confirmation for order %s sent\n", job.Kind, job.Attempt(), a.OrderID)
		succeeded <- job.Kind
		return nil
	})
	worker.HandleJSON(mux, kindPayment, func(ctx context.Context, job *conveyor.Job, a orderArgs) error {
		// A span of the handler's own: the job's context carries its
		// process span, so this one nests under it.
		_, span := tracer.Start(ctx, "payment gateway")
		defer span.End()
		if job.Attempt() == 1 {
			err := errors.New("payment gateway timed out")
			span.SetStatus(codes.Error, err.Error())
			fmt.Fprintf(out, "%-16s attempt %d: %v; retried in %v\n", job.Kind, job.Attempt(), err, cfg.RetryDelay)
			return err
		}
		fmt.Fprintf(out, "%-16s attempt %d: order %s captured\n", job.Kind, job.Attempt(), a.OrderID)
		succeeded <- job.Kind
		return nil
	})
	worker.HandleJSON(mux, kindReminder, func(ctx context.Context, job *conveyor.Job, a orderArgs) error {
		fmt.Fprintf(out, "%-16s attempt %d: reminder for order %s, %v after enqueue (delay %v)\n",
			job.Kind, job.Attempt(), a.OrderID, time.Since(enqueued[job.Kind]).Round(time.Millisecond), cfg.Delay)
		succeeded <- job.Kind
		return nil
	})

	reg, err := tel.ObserveQueues(d, queue)
	if err != nil {
		return "", err
	}
	defer func() { _ = reg.Unregister() }()

	// The request that enqueues: its span is the parent of the send spans.
	args := orderArgs{OrderID: "A-" + runID, Email: "ada@example.com"}
	cctx, span := tracer.Start(ctx, "checkout", trace.WithAttributes(attribute.String("app.order.id", args.OrderID)))
	for _, j := range []struct {
		kind string
		opts *conveyor.EnqueueOptions
	}{
		{kindEmail, nil},
		{kindPayment, nil},
		{kindReminder, &conveyor.EnqueueOptions{Delay: cfg.Delay}},
	} {
		enqueued[j.kind] = time.Now()
		m, err := client.Enqueue(cctx, j.kind, args, j.opts)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			span.End()
			return "", fmt.Errorf("enqueue %s: %w", j.kind, err)
		}
		fmt.Fprintf(out, "%-16s enqueued as %s\n", j.kind, m.ID)
	}
	fmt.Fprintf(out, "checkout: trace %s\n", span.SpanContext().TraceID())
	span.End()

	pool, err := worker.NewPool(d, mux, &worker.Config{
		Queue:       queue,
		Concurrency: 4,
		Middleware:  []conveyor.Middleware{tel.Middleware()}, // first: its span covers the whole chain
		OnPromote:   tel.OnPromote,
		Retry:       &retry.Rules{Policy: retry.Constant(cfg.RetryDelay)},
		Logger:      cfg.Logger,
	})
	if err != nil {
		return "", err
	}
	poolCtx, stop := context.WithCancel(ctx)
	defer stop()
	poolErr := make(chan error, 1)
	go func() { poolErr <- pool.Run(poolCtx) }()

	deadline := time.NewTimer(cfg.Timeout)
	defer deadline.Stop()
	for range cap(succeeded) {
		select {
		case <-succeeded:
		case err := <-poolErr:
			return "", fmt.Errorf("pool stopped early: %w", err)
		case <-deadline.C:
			stop()
			<-poolErr
			return "", fmt.Errorf("jobs not done after %v", cfg.Timeout)
		case <-ctx.Done():
			<-poolErr
			return "", ctx.Err()
		}
	}
	// Run returns once every delivery is settled, which is when each
	// process span ends: after it, all spans are in the batcher.
	stop()
	if err := <-poolErr; err != nil {
		return "", err
	}
	return metricsSummary(ctx, reader)
}

func newDriver(cfg config) (broker.Driver, error) {
	if cfg.Driver == "stream" {
		return stream.New(cfg.Redis, &stream.Config{Prefix: cfg.Prefix, Logger: cfg.Logger})
	}
	return list.New(cfg.Redis, &list.Config{Prefix: cfg.Prefix, Logger: cfg.Logger})
}

// metricsSummary collects the meter provider once and names the run
// counters and the queue's depth per state.
func metricsSummary(ctx context.Context, reader sdkmetric.Reader) (string, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return "", fmt.Errorf("collect metrics: %w", err)
	}
	sums := map[string]int64{}
	depth := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					sums[m.Name] += dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range data.DataPoints {
					st, _ := dp.Attributes.Value(otelconveyor.StateKey)
					depth[st.AsString()] += dp.Value
				}
			}
		}
	}
	return fmt.Sprintf("metrics: sent=%d processed=%d failed=%d retried=%d discarded=%d; queue %s now: ready=%d in_flight=%d delayed=%d discarded=%d",
		sums[otelconveyor.MetricSent], sums[otelconveyor.MetricProcessed], sums[otelconveyor.MetricFailed], sums[otelconveyor.MetricRetried], sums[otelconveyor.MetricDiscarded],
		queue, depth["ready"], depth["in_flight"], depth["delayed"], depth["discarded"]), nil
}

// joinErrors formats the errors of a run on one line each.
func joinErrors(errs []error) string {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// countingExporter counts the spans its exporter accepted, so that the
// summary can tell whether every span got out.
type countingExporter struct {
	sdktrace.SpanExporter
	n atomic.Int64
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		c.n.Add(int64(len(spans)))
	}
	return err
}

// endCounter counts ended spans.
type endCounter struct{ n atomic.Int64 }

func (e *endCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e *endCounter) OnEnd(sdktrace.ReadOnlySpan)                     { e.n.Add(1) }
func (e *endCounter) Shutdown(context.Context) error                  { return nil }
func (e *endCounter) ForceFlush(context.Context) error                { return nil }

// cleanupKeys removes what the run wrote, so running it against a real
// Redis leaves nothing behind.
func cleanupKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

// syncWriter serialises writes from several goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
