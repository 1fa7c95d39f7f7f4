package otel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor"
)

// Middleware returns handler middleware (worker.Config.Middleware; put it
// first, outermost) that runs each job in a CONSUMER span "process
// <queue>", linked to the span that enqueued it (or its child, with
// WithChildSpans), with the job's baggage in the handler's context.
//
// The span lasts until the pool is done with the delivery (see
// conveyor.Job.OnFinish), so it records what became of the job: error
// status when the handler failed, and an event for a retry
// ("conveyor.job.retry", with when it runs again), a postponement, a
// discard ("conveyor.job.discard", with the reason), a lost lease
// ("conveyor.job.lease_lost"), a hand-back at shutdown and a settle that
// failed. A retried job gets one span per run.
//
// It also records the process metrics: messaging.process.duration (the
// handler's run), conveyor.job.queue_wait (first deliveries only),
// conveyor.jobs.processed, .failed, .retried, .discarded and .lease_lost.
//
// Payloads never reach spans or metrics; handler error messages do (cut to
// 1 KiB) unless WithoutErrorText is set.
func (i *Instrumentation) Middleware() conveyor.Middleware {
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) (err error) {
			a := i.jobAttrs(job.Queue, job.Kind, job.ConsumerGroup())
			pctx := i.cfg.prop.Extract(context.Background(), propagation.MapCarrier(job.Headers))
			if b := baggage.FromContext(pctx); b.Len() > 0 {
				ctx = baggage.ContextWithBaggage(ctx, b)
			}
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(a.span...),
				trace.WithAttributes(
					semconv.MessagingMessageID(job.ID),
					AttemptKey.Int(job.Attempt),
					RecoveriesKey.Int(job.Recoveries),
				),
			}
			if producer := trace.SpanContextFromContext(pctx); producer.IsValid() {
				if i.cfg.child {
					ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
				} else {
					opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
				}
			}
			ctx, span := i.tracer.Start(ctx, "process "+job.Queue, opts...)
			start := i.cfg.now()
			if job.Attempt == 0 && job.Recoveries == 0 {
				wait := start.Sub(conveyor.ReadyAt(&job.Message))
				i.m.wait.Record(ctx, max(wait, 0).Seconds(), a.opt)
			}
			job.OnFinish(func(s conveyor.Settlement) { i.finish(span, a, s) })
			defer func() {
				r := recover()
				if r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
				i.ran(ctx, span, a, start, err)
				if r != nil {
					panic(r)
				}
			}()
			return next.ProcessJob(ctx, job)
		})
	}
}

// ran records the end of a handler run: its duration, the run counters
// and, for a failure, the span's error status.
func (i *Instrumentation) ran(ctx context.Context, span trace.Span, a *jobAttrs, start time.Time, err error) {
	secs := i.cfg.now().Sub(start).Seconds()
	i.m.processed.Add(ctx, 1, a.opt)
	if err == nil {
		i.m.duration.Record(ctx, secs, a.opt)
		return
	}
	et := semconv.ErrorTypeKey.String(errorType(err))
	span.SetAttributes(et)
	span.SetStatus(codes.Error, i.errorText(err))
	with := metric.WithAttributes(append(a.set.ToSlice(), et)...)
	i.m.duration.Record(ctx, secs, with)
	i.m.failed.Add(ctx, 1, with)
}

// finish ends a process span when the pool is done with its delivery,
// recording what became of the job.
func (i *Instrumentation) finish(span trace.Span, a *jobAttrs, s conveyor.Settlement) {
	ctx := context.Background()
	span.SetAttributes(OutcomeKey.String(s.Outcome.String()))
	switch s.Outcome {
	case conveyor.OutcomeRetried:
		i.m.retried.Add(ctx, 1, a.opt)
		span.AddEvent("conveyor.job.retry", trace.WithAttributes(attribute.String("conveyor.job.run_at", s.At.UTC().Format(time.RFC3339Nano))))
	case conveyor.OutcomePostponed:
		span.AddEvent("conveyor.job.postpone", trace.WithAttributes(attribute.String("conveyor.job.run_at", s.At.UTC().Format(time.RFC3339Nano))))
	case conveyor.OutcomeDiscarded:
		i.m.discarded.Add(ctx, 1, a.opt)
		reason := s.Reason
		if !i.cfg.errorText {
			reason = ""
		}
		span.AddEvent("conveyor.job.discard", trace.WithAttributes(attribute.String("conveyor.job.discard_reason", cut(reason))))
	case conveyor.OutcomeReleased:
		span.AddEvent("conveyor.job.release")
	case conveyor.OutcomeLeaseLost:
		i.m.leaseLost.Add(ctx, 1, a.opt)
		span.AddEvent("conveyor.job.lease_lost")
		span.SetStatus(codes.Error, "lease lost")
	case conveyor.OutcomeUnsettled:
		span.AddEvent("conveyor.job.settle_failed", trace.WithAttributes(semconv.ErrorTypeKey.String(errorType(s.Err))))
		span.SetStatus(codes.Error, "settle failed")
	}
	span.End()
}

// cut bounds a text attribute at 1 KiB.
func cut(s string) string {
	if len(s) > maxErrorText {
		return s[:maxErrorText] + "…"
	}
	return s
}
