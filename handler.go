package conveyor

import "context"

// Handler processes jobs. ProcessJob returns nil when the job is done; an
// error asks for the configured failure policy (retry with backoff, then
// discard). A handler may also settle the job itself with Job.Ack, Retry or
// Discard; the pool then leaves it as settled.
type Handler interface {
	ProcessJob(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// ProcessJob calls f(ctx, job).
func (f HandlerFunc) ProcessJob(ctx context.Context, job *Job) error { return f(ctx, job) }

// Middleware wraps a Handler, as net/http middleware wraps an http.Handler.
type Middleware func(Handler) Handler

// Chain composes middleware: Chain(a, b)(h) runs a, then b, then h, so the
// first middleware is the outermost.
func Chain(mws ...Middleware) Middleware {
	return func(h Handler) Handler {
		for i := len(mws) - 1; i >= 0; i-- {
			h = mws[i](h)
		}
		return h
	}
}
