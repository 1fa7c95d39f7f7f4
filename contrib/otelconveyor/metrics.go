package otelconveyor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/conveyorq/conveyor/broker"
)

// The metrics an Instrumentation records. Durations are in seconds, as the
// semantic conventions ask.
const (
	MetricSent      = "messaging.client.sent.messages"
	MetricDuration  = "messaging.process.duration"
	MetricQueueWait = "conveyor.job.queue_wait"
	MetricProcessed = "conveyor.jobs.processed"
	MetricFailed    = "conveyor.jobs.failed"
	MetricRetried   = "conveyor.jobs.retried"
	MetricDiscarded = "conveyor.jobs.discarded"
	MetricLeaseLost = "conveyor.jobs.lease_lost"
	MetricLateness  = "conveyor.delay.promotion.lateness"
	MetricDepth     = "conveyor.queue.depth"
)

// secondsBuckets suit job timings from sub-millisecond no-ops to
// minutes-long jobs; the SDK's default buckets (0, 5, 10, 25 ... 10000)
// are for milliseconds and would put every job in the first.
var secondsBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
	0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}

type instruments struct {
	meter     metric.Meter
	sent      metric.Int64Counter
	duration  metric.Float64Histogram
	wait      metric.Float64Histogram
	processed metric.Int64Counter
	failed    metric.Int64Counter
	retried   metric.Int64Counter
	discarded metric.Int64Counter
	leaseLost metric.Int64Counter
	lateness  metric.Float64Histogram
}

func newInstruments(m metric.Meter) (instruments, error) {
	in := instruments{meter: m}
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithUnit("{job}"), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = fmt.Errorf("otelconveyor: instrument %s: %w", name, e)
		}
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(secondsBuckets...))
		if e != nil && err == nil {
			err = fmt.Errorf("otelconveyor: instrument %s: %w", name, e)
		}
		return h
	}
	in.sent, err = m.Int64Counter(MetricSent, metric.WithUnit("{message}"),
		metric.WithDescription("Jobs enqueued (with error.type for jobs the enqueue refused or may not have stored)."))
	if err != nil {
		return in, fmt.Errorf("otelconveyor: instrument %s: %w", MetricSent, err)
	}
	in.duration = histogram(MetricDuration, "How long handler runs took (with error.type when they failed).")
	in.wait = histogram(MetricQueueWait, "How long jobs waited from becoming ready (enqueued, or due when delayed) to their first run.")
	in.processed = counter(MetricProcessed, "Handler runs that returned, whatever the result.")
	in.failed = counter(MetricFailed, "Handler runs that returned an error or panicked.")
	in.retried = counter(MetricRetried, "Jobs handed back to run again after a failure.")
	in.discarded = counter(MetricDiscarded, "Jobs moved to the discard queue by the pool or its middleware.")
	in.leaseLost = counter(MetricLeaseLost, "Runs whose lease was lost (the job was delivered again elsewhere).")
	in.lateness = histogram(MetricLateness, "How late, past its due time, the earliest timer of each promotion call was promoted.")
	return in, err
}

// OnPromote records the lateness of a promotion call; pass it as
// worker.Config.OnPromote or delay.PromoterConfig.OnPromote.
func (i *Instrumentation) OnPromote(queue string, p broker.Promotion) {
	i.m.lateness.Record(context.Background(), p.Late.Seconds(), metric.WithAttributes(
		semconv.MessagingSystemKey.String(System),
		semconv.MessagingDestinationName(queue),
	))
}
