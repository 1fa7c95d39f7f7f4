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
)

var (
	// ErrAlreadySettled is returned by a settle method of a Job that was
	// already acked, retried, discarded or handed back.
	ErrAlreadySettled = errors.New("conveyor: job already settled")
	// ErrPayloadTooLarge is wrapped by every *PayloadTooLargeError.
	ErrPayloadTooLarge = errors.New("conveyor: payload too large")
	// ErrClientClosed is returned by Enqueue after Client.Close.
	ErrClientClosed = errors.New("conveyor: client closed")
)

// PayloadTooLargeError reports a payload over the client's cap.
type PayloadTooLargeError struct {
	Kind  string
	Size  int
	Limit int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("conveyor: payload of %s is %d bytes, over the %d byte cap", e.Kind, e.Size, e.Limit)
}

func (e *PayloadTooLargeError) Unwrap() error { return ErrPayloadTooLarge }

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
