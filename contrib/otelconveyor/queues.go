package otelconveyor

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/conveyorq/conveyor/broker"
)

// queueReadTimeout bounds the Redis reads of one collection.
const queueReadTimeout = 5 * time.Second

// ObserveQueues registers the gauge conveyor.queue.depth: the jobs of each
// queue per state (conveyor.queue.state: ready, in_flight, delayed,
// discarded), read from d at each collection in one round trip (a pipeline
// of one script call per queue). With no queues named it observes every
// queue d's registry knows, which costs one more round trip. d must keep
// its queues in Redis (the list and stream drivers); Unregister the
// registration to stop.
func (i *Instrumentation) ObserveQueues(d broker.Driver, queues ...string) (metric.Registration, error) {
	insp, ok := d.(broker.Inspector)
	if !ok {
		return nil, fmt.Errorf("otelconveyor: ObserveQueues: driver %T keeps no queues to observe: %w", d, broker.ErrUnsupported)
	}
	for _, q := range queues {
		if err := broker.ValidateQueue(q); err != nil {
			return nil, fmt.Errorf("otelconveyor: ObserveQueues: %w", err)
		}
	}
	gauge, err := i.m.meter.Int64ObservableGauge(MetricDepth, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs of a queue in each state: ready, in_flight, delayed, discarded."))
	if err != nil {
		return nil, fmt.Errorf("otelconveyor: instrument %s: %w", MetricDepth, err)
	}
	system := semconv.MessagingSystemKey.String(System)
	return i.m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, queueReadTimeout)
		defer cancel()
		names := queues
		if len(names) == 0 {
			all, err := insp.Queues(ctx)
			if err != nil {
				return fmt.Errorf("otelconveyor: queue depth: %w", err)
			}
			if len(all) == 0 {
				return nil
			}
			names = all
		}
		sizes, err := insp.QueueSizes(ctx, names...)
		if err != nil {
			return fmt.Errorf("otelconveyor: queue depth: %w", err)
		}
		for _, s := range sizes {
			dest := semconv.MessagingDestinationName(s.Queue)
			for _, st := range []struct {
				name string
				n    int64
			}{{"ready", s.Ready}, {"in_flight", s.InFlight}, {"delayed", s.Delayed}, {"discarded", s.Discarded}} {
				o.ObserveInt64(gauge, st.n, metric.WithAttributes(system, dest, StateKey.String(st.name)))
			}
		}
		return nil
	}, gauge)
}
