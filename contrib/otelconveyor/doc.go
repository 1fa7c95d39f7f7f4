// Package otelconveyor traces and measures Conveyor jobs with
// OpenTelemetry: a PRODUCER span per enqueue whose context travels in the
// job's headers, a CONSUMER span per run joined to it, attributes from the
// messaging semantic conventions, and metrics for runs, failures, retries,
// discards, lost leases, durations, queue wait, promotion lateness and
// queue depth.
//
// It imports OpenTelemetry API packages only: the program chooses the SDK
// and exporters (examples/tracing shows OTLP over HTTP).
//
//	tel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: tp, MeterProvider: mp}) // nil: global providers
//	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{
//		Middleware: []conveyor.EnqueueMiddleware{tel.EnqueueMiddleware()},
//	})
//	pool, err := worker.NewPool(d, mux, &worker.Config{
//		Middleware: []conveyor.Middleware{tel.Middleware()}, // first: outermost
//		OnPromote:  tel.OnPromote,
//	})
//	reg, err := tel.ObserveQueues(d, "default") // depth gauges; d: a list or stream driver
//
// docs/observability.md walks through the spans one job produces.
package otelconveyor
