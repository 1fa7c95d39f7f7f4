package middleware

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/conveyorq/conveyor"
)

// TimeoutConfig configures Timeout. A job's own Message.Timeout wins over
// both fields.
type TimeoutConfig struct {
	// Default bounds a run of a job whose kind has no entry in Kinds.
	// Defaults to none (0).
	Default time.Duration
	// Kinds bounds the runs of each kind. Timeout copies the map.
	Kinds map[string]time.Duration
}

// Timeout gives the handler's context a deadline: the job's own Timeout
// when set, else the one of its kind, else the default; with none of them,
// the handler runs without a deadline from Timeout.
//
// The handler runs in the caller's goroutine: a handler that ignores its
// context runs to its end, but once it returns past the deadline without
// an error its run is reported as failed with an error wrapping
// context.DeadlineExceeded (unless it settled the job itself). An error the
// handler returned past the deadline is wrapped the same way, so
// errors.Is(err, context.DeadlineExceeded) holds for every run that timed
// out.
//
// worker.Pool applies Message.Timeout and its JobTimeout to the whole chain
// as well; the earlier deadline wins.
func Timeout(cfg *TimeoutConfig) (conveyor.Middleware, error) {
	var c TimeoutConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Default < 0 {
		return nil, errors.New("middleware: Timeout: negative Default")
	}
	for k, d := range c.Kinds {
		if d < 0 {
			return nil, fmt.Errorf("middleware: Timeout: negative timeout for kind %q", k)
		}
	}
	kinds := maps.Clone(c.Kinds)
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			d := job.Timeout
			if d <= 0 {
				var ok bool
				if d, ok = kinds[job.Kind]; !ok {
					d = c.Default
				}
			}
			if d <= 0 {
				return next.ProcessJob(ctx, job)
			}
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			err := next.ProcessJob(ctx, job)
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) || job.Settled() {
				return err
			}
			switch {
			case err == nil:
				return fmt.Errorf("middleware: %s job %s ran past its deadline: %w", job.Kind, job.ID, context.DeadlineExceeded)
			case errors.Is(err, context.DeadlineExceeded):
				return err
			default:
				return fmt.Errorf("middleware: %s job %s ran past its deadline: %w: %w", job.Kind, job.ID, context.DeadlineExceeded, err)
			}
		})
	}, nil
}
