package otelconveyor

import (
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
const ScopeName = "github.com/conveyorq/conveyor/contrib/otelconveyor"

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

// Instrumentation traces and measures jobs: EnqueueMiddleware for clients,
// Middleware for worker pools, OnPromote for promoters and ObserveQueues
// for queue depths. One Instrumentation serves any number of clients,
// pools and queues; it is safe for concurrent use.
type Instrumentation struct {
	cfg    Config
	tracer trace.Tracer
	m      instruments

	mu    sync.RWMutex
	attrs map[attrKey]*jobAttrs // per queue, kind and group, built once
}

// New returns an Instrumentation configured by cfg; nil means all
// defaults.
func New(cfg *Config) (*Instrumentation, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otelapi.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otelapi.GetMeterProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	i := &Instrumentation{
		cfg:    c,
		tracer: c.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		attrs:  map[attrKey]*jobAttrs{},
	}
	var err error
	if i.m, err = newInstruments(c.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))); err != nil {
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
	if i.cfg.NoErrorText {
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
