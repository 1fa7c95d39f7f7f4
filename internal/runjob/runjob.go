// Package runjob holds what every runner of jobs does alike, a worker pool
// and the test runner of contrib/conveyortest: calling the handler chain so
// that a panic cannot take the runner down, and telling how a job ended when
// its settle failed.
package runjob

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// ErrLeftUnsettled is the error of a job whose failure policy neither
// retried nor discarded it and reported no error of its own.
var ErrLeftUnsettled = errors.New("conveyor: job left unsettled")

// Call runs h on job, turning a panic into an error with its stack.
func Call(ctx context.Context, h conveyor.Handler, job *conveyor.Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("conveyor: handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return h.ProcessJob(ctx, job)
}

// Settled returns s, or the outcome of a settle that failed with err: the
// lease was lost (broker.ErrLeaseLost), or the job is left unsettled.
func Settled(s conveyor.Settlement, err error) conveyor.Settlement {
	switch {
	case err == nil:
		return s
	case errors.Is(err, broker.ErrLeaseLost):
		return conveyor.Settlement{Outcome: conveyor.OutcomeLeaseLost, Err: err}
	default:
		return conveyor.Settlement{Outcome: conveyor.OutcomeUnsettled, Err: err}
	}
}
