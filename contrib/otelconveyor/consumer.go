package otelconveyor

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
// Config.ChildSpans), with the job's baggage in the handler's context.
//
// The span lasts until the pool is done with the delivery (see
// conveyor.Job.OnFinish), so it records what became of the job: error
// status when the handler failed, and an event for a retry
// ("conveyor.job.retry", with when it runs again), a postponement, a
// discard ("conveyor.job.discard", with the reason), a lost lease
// ("conveyor.job.lease_lost"), a hand-back at shutdown and a settle that
// failed. A retried job gets one span per run.
//
// It also records the process metrics when the delivery is over:
// messaging.process.duration (the chain's run), conveyor.job.queue_wait
// (runs of jobs with Retries 0 and no recoveries, from conveyor.ReadyAt),
// conveyor.jobs.processed, .failed, .retried, .discarded and .lease_lost.
// A run postponed or handed back at shutdown is not counted as processed.
//
// Payloads never reach spans or metrics; handler error messages do (cut to
// 1 KiB) unless Config.NoErrorText is set.
func (i *Instrumentation) Middleware() conveyor.Middleware {
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) (err error) {
			a := i.jobAttrs(job.Queue, job.Kind, job.ConsumerGroup())
			pctx := i.cfg.Propagator.Extract(context.Background(), propagation.MapCarrier(job.Headers))
			if b := baggage.FromContext(pctx); b.Len() > 0 {
				ctx = baggage.ContextWithBaggage(ctx, b)
			}
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(a.span...),
				trace.WithAttributes(
					semconv.MessagingMessageID(job.ID),
					AttemptKey.Int(job.Attempt()),
					RecoveriesKey.Int(job.Recoveries),
				),
			}
			if producer := trace.SpanContextFromContext(pctx); producer.IsValid() && i.cfg.ChildSpans {
				ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
			} else {
				// A root even when the pool's context holds a span (Run
				// started inside one): otherwise every run of the pool's
				// life would join that trace.
				opts = append(opts, trace.WithNewRoot())
				if producer.IsValid() {
					opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
				}
			}
			ctx, span := i.tracer.Start(ctx, "process "+job.Queue, opts...)
			r := &run{start: i.cfg.Now(), first: job.Retries == 0 && job.Recoveries == 0, readyAt: conveyor.ReadyAt(&job.Message)}
			job.OnFinish(func(s conveyor.Settlement) { i.finish(span, a, r, s) })
			defer func() {
				p := recover()
				r.took = i.cfg.Now().Sub(r.start)
				r.err = runError(err, p)
				if r.err != nil {
					et := semconv.ErrorTypeKey.String(errorType(r.err))
					span.SetAttributes(et)
					span.SetStatus(codes.Error, i.errorText(r.err))
				}
				if p != nil {
					panic(p)
				}
			}()
			return next.ProcessJob(ctx, job)
		})
	}
}

// runError is the error a run ended with: its own, or the panic that went up
// through it.
func runError(err error, p any) error {
	if p != nil {
		return fmt.Errorf("panic: %v", p)
	}
	return err
}

// run is what the middleware learns of one handler run, for the metrics
// recorded when the delivery is over.
type run struct {
	start   time.Time
	took    time.Duration
	err     error
	first   bool      // Retries 0 and no recoveries: no earlier run failed or crashed
	readyAt time.Time // conveyor.ReadyAt of the message
}

// finish ends a process span when the pool is done with its delivery,
// recording what became of the job.
//
// A postponed run (a rate limit, a held idempotency key) and a run handed
// back at shutdown are not counted as processed and give no duration or
// wait: the job's real run comes later, and its queue wait then includes
// the postponement.
func (i *Instrumentation) finish(span trace.Span, a *jobAttrs, r *run, s conveyor.Settlement) {
	ctx := context.Background()
	span.SetAttributes(OutcomeKey.String(s.Outcome.String()))
	if s.Outcome != conveyor.OutcomePostponed && s.Outcome != conveyor.OutcomeReleased {
		i.m.processed.Add(ctx, 1, a.opt)
		if r.first && !r.readyAt.IsZero() {
			i.m.wait.Record(ctx, max(r.start.Sub(r.readyAt), 0).Seconds(), a.opt)
		}
		if r.err == nil {
			i.m.duration.Record(ctx, r.took.Seconds(), a.opt)
		} else {
			with := metric.WithAttributes(append(a.set.ToSlice(), semconv.ErrorTypeKey.String(errorType(r.err)))...)
			i.m.duration.Record(ctx, r.took.Seconds(), with)
			i.m.failed.Add(ctx, 1, with)
		}
	}
	switch s.Outcome {
	case conveyor.OutcomeRetried:
		i.m.retried.Add(ctx, 1, a.opt)
		span.AddEvent("conveyor.job.retry", trace.WithAttributes(attribute.String("conveyor.job.run_at", s.At.UTC().Format(time.RFC3339Nano))))
	case conveyor.OutcomePostponed:
		span.AddEvent("conveyor.job.postpone", trace.WithAttributes(attribute.String("conveyor.job.run_at", s.At.UTC().Format(time.RFC3339Nano))))
	case conveyor.OutcomeDiscarded:
		i.m.discarded.Add(ctx, 1, a.opt)
		reason := s.Reason
		if i.cfg.NoErrorText {
			reason = ""
		}
		span.AddEvent("conveyor.job.discard", trace.WithAttributes(attribute.String("conveyor.job.discard_reason", cut(reason))))
	case conveyor.OutcomeReleased:
		span.AddEvent("conveyor.job.release")
	case conveyor.OutcomeCanceled:
		span.AddEvent("conveyor.job.cancel")
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
