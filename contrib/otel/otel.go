package otel

import (
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of Conveyor's tracer and meter.
const ScopeName = "github.com/conveyorq/conveyor/contrib/otel"

// System is the messaging.system attribute of every span and measurement.
const System = "conveyor"

// Attribute keys Conveyor adds beside the messaging semantic conventions.
const (
	// KindKey is the job kind (the handler route).
	KindKey = attribute.Key("conveyor.job.kind")
	// AttemptKey is the run's attempt number, from 1 (Message.Attempt).
	AttemptKey = attribute.Key("conveyor.job.attempt")
	// RecoveriesKey counts the job's crash recoveries before this run.
	RecoveriesKey = attribute.Key("conveyor.job.recoveries")
	// OutcomeKey is how a delivery ended (conveyor.Outcome's String).
	OutcomeKey = attribute.Key("conveyor.job.outcome")
	// StateKey is a queue state of the depth gauge: ready, in_flight,
	// delayed, discarded.
	StateKey = attribute.Key("conveyor.queue.state")
)

// Option configures an Instrumentation.
type Option func(*config)

type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	prop      propagation.TextMapPropagator
	child     bool
	now       func() time.Time
	errorText bool
}

// WithTracerProvider sets where spans go. Defaults to the global tracer
// provider (otel.GetTracerProvider) at New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets where measurements go. Defaults to the global
// meter provider (otel.GetMeterProvider) at New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithPropagator sets how trace context travels in job headers. Defaults to
// W3C Trace Context and Baggage, not the global propagator (a no-op unless
// the program set one), so that producer and consumer spans join without
// further set-up.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// WithChildSpans makes each process span a child of the producer's span
// (one trace from enqueue to the last run) instead of the root of its own
// trace linked to it. Links are the default: a job may run long after, and
// many times after, the request that enqueued it, and a trace per run keeps
// each one readable; backends that show links join them either way.
func WithChildSpans() Option {
	return func(c *config) { c.child = true }
}

// WithoutErrorText keeps handler error messages out of spans: a failed
// run's status and events then carry its error.type only. Use it when
// errors may quote user data. By default the message is kept, cut to 1 KiB.
func WithoutErrorText() Option {
	return func(c *config) { c.errorText = false }
}

// withClock is for tests.
func withClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// Instrumentation traces and measures jobs: EnqueueMiddleware for clients,
// Middleware for worker pools, OnPromote for promoters and ObserveQueues
// for queue depths. One Instrumentation serves any number of clients,
// pools and queues; it is safe for concurrent use.
type Instrumentation struct {
	cfg    config
	tracer trace.Tracer
	m      instruments

	mu    sync.RWMutex
	attrs map[attrKey]*jobAttrs // per queue, kind and group, built once
}

// New returns an Instrumentation configured by opts.
func New(opts ...Option) (*Instrumentation, error) {
	c := config{errorText: true}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("otel: nil Option")
		}
		o(&c)
	}
	if c.tp == nil {
		c.tp = otelapi.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otelapi.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	if c.now == nil {
		c.now = time.Now
	}
	i := &Instrumentation{
		cfg:    c,
		tracer: c.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		attrs:  map[attrKey]*jobAttrs{},
	}
	var err error
	if i.m, err = newInstruments(c.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))); err != nil {
		return nil, err
	}
	return i, nil
}

type attrKey struct{ queue, kind, group string }

// jobAttrs are the attributes every span and measurement of one queue, kind
// and group share, built once so that a job costs no attribute allocations.
type jobAttrs struct {
	span []attribute.KeyValue // process span attributes, without per-job ones
	set  attribute.Set        // metric attributes
	opt  metric.MeasurementOption
}

func (i *Instrumentation) jobAttrs(queue, kind, group string) *jobAttrs {
	k := attrKey{queue, kind, group}
	i.mu.RLock()
	a := i.attrs[k]
	i.mu.RUnlock()
	if a != nil {
		return a
	}
	base := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(System),
		semconv.MessagingDestinationName(queue),
		KindKey.String(kind),
	}
	if group != "" {
		base = append(base, semconv.MessagingConsumerGroupName(group))
	}
	set := attribute.NewSet(base...)
	a = &jobAttrs{
		span: append([]attribute.KeyValue{
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
		}, base...),
		set: set,
		opt: metric.WithAttributeSet(set),
	}
	i.mu.Lock()
	if len(i.attrs) < maxAttrSets {
		i.attrs[k] = a
	}
	i.mu.Unlock()
	return a
}

// maxAttrSets bounds the cache of attribute sets: queue and kind names come
// from the program, but a bug that makes them from data must not grow it
// without end.
const maxAttrSets = 10000

// errorType is the error.type of err: its Go type, as the semantic
// conventions suggest for a language without error codes.
func errorType(err error) string {
	if err == nil {
		return ""
	}
	return typeName(err)
}

// errorText is err's message as spans carry it: valid UTF-8 cut to 1 KiB
// on a character boundary (an exporter refuses a batch with one invalid
// string), or its error.type when the instrumentation keeps error text out.
func (i *Instrumentation) errorText(err error) string {
	if !i.cfg.errorText {
		return errorType(err)
	}
	return cut(err.Error())
}

// cut makes s valid UTF-8 and bounds it at maxErrorText bytes without
// splitting a character.
func cut(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxErrorText {
		return s
	}
	n := maxErrorText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

const maxErrorText = 1024
