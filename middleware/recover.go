package middleware

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/conveyorq/conveyor"
)

// PanicError is the error Recover returns for a handler that panicked.
type PanicError struct {
	// Value is what the handler passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, taken where it panicked.
	Stack []byte
}

// Error includes the stack, so that a discard reason or a log line built
// from the error alone still says where the panic came from.
func (e *PanicError) Error() string {
	return fmt.Sprintf("conveyor: handler panicked: %v\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error, so that errors.Is
// sees through panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Recover turns a panic below it into a *PanicError carrying the stack, so
// one bad job fails (and is retried or discarded by the policy) instead of
// taking the process down. worker.Pool has a last-resort recover of its own;
// Recover makes the conversion explicit, typed, and available wherever a
// handler runs outside a pool. Put it outermost.
func Recover() conveyor.Middleware {
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) (err error) {
			defer func() {
				if r := recover(); r != nil {
					// debug.Stack runs on top of the panicking frames: the
					// stack still shows where the panic happened.
					err = &PanicError{Value: r, Stack: debug.Stack()}
				}
			}()
			return next.ProcessJob(ctx, job)
		})
	}
}
