package otelconveyor

import (
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Config configures an Instrumentation. The zero value is valid, and New
// takes nil for all defaults.
type Config struct {
	// TracerProvider is where spans go. Defaults to the global tracer
	// provider (otel.GetTracerProvider) at New.
	TracerProvider trace.TracerProvider
	// MeterProvider is where measurements go. Defaults to the global meter
	// provider (otel.GetMeterProvider) at New.
	MeterProvider metric.MeterProvider
	// Propagator is how trace context travels in job headers. Defaults to
	// W3C Trace Context and Baggage, not the global propagator (a no-op
	// unless the program set one), so that producer and consumer spans join
	// without further set-up.
	Propagator propagation.TextMapPropagator
	// ChildSpans makes each process span a child of the producer's span
	// (one trace from enqueue to the last run) instead of the root of its
	// own trace linked to it. Defaults to false, links: a job may run long
	// after, and many times after, the request that enqueued it, and a
	// trace per run keeps each one readable; backends that show links join
	// them either way.
	ChildSpans bool
	// NoErrorText keeps handler error messages out of spans: a failed run's
	// status and events then carry its error.type only. Set it when errors
	// may quote user data. Defaults to false: the message is kept, cut to
	// 1 KiB.
	NoErrorText bool
	// Now is the clock for run durations and queue wait. Defaults to
	// time.Now.
	Now func() time.Time
}
