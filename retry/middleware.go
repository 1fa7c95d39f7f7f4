package retry

import (
	"context"
	"errors"
	"time"

	"github.com/conveyorq/conveyor"
)

// settleTimeout bounds one settle round trip made by the middleware.
const settleTimeout = 10 * time.Second

// Middleware returns middleware that settles the jobs its handler fails, by
// r (nil: the zero Rules), for programs that compose their own chain or
// want one kind's chain to retry differently. worker.Pool already applies
// worker.Config.Retry to what the chain leaves unsettled, so most programs
// need only that.
//
// The middleware returns the handler's error unchanged, so outer middleware
// (logging, metrics) still sees the failure; the pool leaves a job the
// middleware settled alone. It does not settle:
//   - a job the handler settled itself;
//   - a job whose context the pool cancelled (lease lost, or shutdown after
//     the grace): the pool knows what became of it. A handler timeout
//     (context.DeadlineExceeded) is a failure and is settled;
//   - a panic: it passes through. Put a recovering middleware inside this
//     one (after it in conveyor.Chain) to retry panics by these rules.
//
// When the settle call fails (Redis out of reach), the job stays unsettled
// and the pool settles it by its own rules.
func Middleware(r *Rules) (conveyor.Middleware, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			err := next.ProcessJob(ctx, job)
			if err == nil || job.Settled() {
				return err
			}
			if ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return err
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
			defer cancel()
			_, _ = r.Settle(sctx, job, err)
			return err
		})
	}, nil
}
