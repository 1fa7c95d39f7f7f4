package conveyor

import (
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// Errors shared with the broker, re-exported so that most programs import
// only this package.
var (
	ErrLeaseLost      = broker.ErrLeaseLost
	ErrUnsupported    = broker.ErrUnsupported
	ErrInvalidQueue   = broker.ErrInvalidQueue
	ErrInvalidMessage = broker.ErrInvalidMessage
	ErrQueueFull      = broker.ErrQueueFull
	ErrDuplicate      = broker.ErrDuplicate
	// ErrJobCanceled is the cause of a running job's context when the job
	// is cancelled (Client.CancelJob): a handler tests it with
	// errors.Is(context.Cause(ctx), conveyor.ErrJobCanceled).
	ErrJobCanceled = broker.ErrJobCanceled
)

var (
	// ErrAlreadySettled is returned by a settle method of a Job that was
	// already acked, retried, discarded or handed back.
	ErrAlreadySettled = errors.New("conveyor: job already settled")
	// ErrPayloadTooLarge is wrapped by every *PayloadTooLargeError.
	ErrPayloadTooLarge = errors.New("conveyor: payload too large")
)

// RequestError names the request of an EnqueueMany call that could not be
// turned into a job (invalid options, a payload too large, args that do not
// encode) by its index in the call, "job 417: ...": the ID the client
// would have generated for it is never shown, the caller never saw it.
// errors.Is and errors.As see through to Err.
type RequestError struct {
	Index int
	Err   error
}

func (e *RequestError) Error() string { return fmt.Sprintf("job %d: %v", e.Index, e.Err) }

func (e *RequestError) Unwrap() error { return e.Err }

// PayloadTooLargeError reports a job whose payload and headers are over the
// client's cap (ClientConfig.MaxPayloadBytes). It is ErrPayloadTooLarge and
// ErrInvalidMessage to errors.Is.
type PayloadTooLargeError struct {
	Kind string
	// Size is what counts against the cap: the payload's bytes plus Headers.
	Size int
	// Headers is the bytes of the caller's header names and values.
	Headers int
	Limit   int
}

func (e *PayloadTooLargeError) Error() string {
	if e.Headers == 0 {
		return fmt.Sprintf("conveyor: payload of %s is %d bytes, over the %d byte cap", e.Kind, e.Size, e.Limit)
	}
	return fmt.Sprintf("conveyor: payload and headers of %s are %d bytes (headers %d), over the %d byte cap", e.Kind, e.Size, e.Headers, e.Limit)
}

func (e *PayloadTooLargeError) Unwrap() error { return ErrPayloadTooLarge }

// Is makes a job over the cap an invalid message too, as a job over any
// other limit is.
func (e *PayloadTooLargeError) Is(target error) bool { return target == ErrInvalidMessage }

// SkipRetry marks err as final: the pool discards the job instead of
// retrying it. errors.Is and errors.As see through to err.
func SkipRetry(err error) error { return &controlError{err: err, skip: true} }

// RetryAfter asks the pool to retry the job after d rather than after the
// backoff policy's delay (for example when a downstream API said when).
func RetryAfter(d time.Duration, err error) error { return &controlError{err: err, after: d} }

type controlError struct {
	err   error
	skip  bool
	after time.Duration
}

func (e *controlError) Error() string {
	if e.err == nil {
		return "conveyor: no error"
	}
	return e.err.Error()
}

func (e *controlError) Unwrap() error { return e.err }

// IsSkipRetry reports whether err was marked with SkipRetry.
func IsSkipRetry(err error) bool {
	var c *controlError
	return errors.As(err, &c) && c.skip
}

// RetryAfterOf returns the delay err asks for with RetryAfter.
func RetryAfterOf(err error) (time.Duration, bool) {
	var c *controlError
	if errors.As(err, &c) && !c.skip && c.after > 0 {
		return c.after, true
	}
	return 0, false
}
