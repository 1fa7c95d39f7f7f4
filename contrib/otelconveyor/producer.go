package otelconveyor

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
				i.cfg.Propagator.Inject(ctx, propagation.MapCarrier(m.Headers))
			}
			err := next(ctx, msgs)
			i.countSent(ctx, msgs, err)
			if err != nil {
				// Error status even when only some jobs were refused: the
				// call returned an error.
				span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
				span.SetStatus(codes.Error, i.errorText(err))
			}
			return err
		}
	}
}

// countSent adds the jobs of one call to messaging.client.sent.messages, per
// queue: a job the call stored counts without error.type, a refused one
// with its error's. A call that failed with an error naming neither queue
// nor job (Redis out of reach) counts all its jobs as failed.
func (i *Instrumentation) countSent(ctx context.Context, msgs []*broker.Message, err error) {
	failed := refused(msgs, err)
	type key struct {
		queue, errType string
	}
	n := map[key]int64{}
	for _, m := range msgs {
		k := key{queue: m.Queue}
		if e := failed[m]; e != nil {
			k.errType = errorType(e)
		}
		n[k]++
	}
	for k, c := range n {
		attrs := []attribute.KeyValue{
			semconv.MessagingSystemKey.String(System),
			semconv.MessagingOperationName("send"),
			semconv.MessagingDestinationName(k.queue),
		}
		if k.errType != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(k.errType))
		}
		i.m.sent.Add(ctx, c, metric.WithAttributes(attrs...))
	}
}

// refused maps each message of msgs that err says was not stored to the
// error that says so. Drivers name the message of a refused duplicate
// (*broker.DuplicateError) and the queue of a refused queue
// (*broker.QueueError); any other error leaves every message's fate
// unknown, so all count as refused.
func refused(msgs []*broker.Message, err error) map[*broker.Message]error {
	if err == nil {
		return nil
	}
	out := map[*broker.Message]error{}
	parts := []error{err}
	if m, ok := err.(interface{ WrappedErrors() []error }); ok {
		parts = m.WrappedErrors()
	}
	for _, e := range parts {
		var de *broker.DuplicateError
		var qe *broker.QueueError
		switch {
		case errors.As(e, &de):
			for _, m := range msgs {
				if m == de.Message || (de.Message == nil && m.Queue == de.Queue && m.ID == de.ID) {
					out[m] = e
				}
			}
		case errors.As(e, &qe):
			for _, m := range msgs {
				if m.Queue == qe.Queue {
					out[m] = e
				}
			}
		default:
			for _, m := range msgs {
				out[m] = e
			}
			return out
		}
	}
	return out
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
