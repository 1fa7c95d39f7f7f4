package otel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// EnqueueMiddleware returns client middleware (conveyor.ClientConfig.
// Middleware) that wraps each Enqueue or EnqueueMany call in a PRODUCER
// span "send <queue>" and injects its trace context into the headers of
// every job the call stores, so that the jobs' process spans join it. A
// call with jobs for several queues gets one span named "send". It counts
// the jobs sent in messaging.client.sent.messages.
func (i *Instrumentation) EnqueueMiddleware() conveyor.EnqueueMiddleware {
	return func(next conveyor.EnqueueFunc) conveyor.EnqueueFunc {
		return func(ctx context.Context, msgs []*broker.Message) error {
			if len(msgs) == 0 {
				return next(ctx, msgs)
			}
			queue := msgs[0].Queue
			for _, m := range msgs[1:] {
				if m.Queue != queue {
					queue = ""
					break
				}
			}
			name := "send"
			attrs := []attribute.KeyValue{
				semconv.MessagingSystemKey.String(System),
				semconv.MessagingOperationName("send"),
				semconv.MessagingOperationTypeSend,
			}
			if queue != "" {
				name += " " + queue
				attrs = append(attrs, semconv.MessagingDestinationName(queue))
			}
			if len(msgs) == 1 {
				attrs = append(attrs, semconv.MessagingMessageID(msgs[0].ID), KindKey.String(msgs[0].Kind))
			} else {
				attrs = append(attrs, semconv.MessagingBatchMessageCount(len(msgs)))
			}
			ctx, span := i.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			for _, m := range msgs {
				if m.Headers == nil {
					m.Headers = make(map[string]string, 2)
				}
				i.cfg.prop.Inject(ctx, propagation.MapCarrier(m.Headers))
			}
			err := next(ctx, msgs)
			i.countSent(ctx, msgs, err)
			if err != nil {
				span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
				span.SetStatus(codes.Error, i.errorText(err))
			}
			return err
		}
	}
}

// countSent adds the jobs of one call to messaging.client.sent.messages, per
// queue; a failed call counts its jobs with its error.type.
func (i *Instrumentation) countSent(ctx context.Context, msgs []*broker.Message, err error) {
	perQueue := map[string]int64{}
	for _, m := range msgs {
		perQueue[m.Queue]++
	}
	for q, n := range perQueue {
		attrs := []attribute.KeyValue{
			semconv.MessagingSystemKey.String(System),
			semconv.MessagingOperationName("send"),
			semconv.MessagingDestinationName(q),
		}
		if err != nil {
			attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(err)))
		}
		i.m.sent.Add(ctx, n, metric.WithAttributes(attrs...))
	}
}

// typeName names err's type, looking through the wrappers of fmt.Errorf
// and errors.Join, which say nothing about what failed.
func typeName(err error) string {
	for {
		t := fmt.Sprintf("%T", err)
		if t != "*fmt.wrapError" && t != "*fmt.wrapErrors" {
			return t
		}
		inner := errors.Unwrap(err)
		if inner == nil {
			if m, ok := err.(interface{ Unwrap() []error }); ok && len(m.Unwrap()) > 0 {
				inner = m.Unwrap()[0]
			}
		}
		if inner == nil {
			return t
		}
		err = inner
	}
}
