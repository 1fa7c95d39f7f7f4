package middleware

import (
	"context"
	"log/slog"
	"time"

	"github.com/conveyorq/conveyor"
)

// LoggingOptions configure Logging. A nil *LoggingOptions means defaults.
type LoggingOptions struct {
	// Headers lists the header keys whose values may appear in the records,
	// in a group "headers" (for example a correlation ID). Defaults to none:
	// header values, like payloads, are never logged unless listed here.
	Headers []string
}

// The outcomes Logging reports under the key "outcome".
const (
	OutcomeDone      = "done"      // the chain returned nil
	OutcomeFailed    = "failed"    // the chain returned an error
	OutcomePanicked  = "panicked"  // a panic went up through Logging
	OutcomePostponed = "postponed" // handed back to run later, not an attempt (RateLimit, Idempotency)
	OutcomeDuplicate = "duplicate" // its idempotency key was done: acked without running (Idempotency)
)

// Logging writes two records per run of a job to logger: one at Debug when
// it starts ("job started") and one when the chain below returns: Info on
// success ("job done", or "job postponed" and "job skipped as duplicate"
// for runs RateLimit or Idempotency handed back or skipped), Warn on error
// ("job failed"), and Error for a panic on its way up ("job panicked";
// put Recover above Logging to turn it into an error).
//
// The keys are stable: queue, kind, job_id, attempt, recoveries on both;
// outcome and duration_ms (float, milliseconds) on the end record; error
// when the run failed; run_at when it was postponed. The payload is never
// logged, nor header values unless opts lists their keys. A nil logger
// means slog.Default().
func Logging(logger *slog.Logger, opts *LoggingOptions) conveyor.Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	var headers []string
	if opts != nil {
		headers = append(headers, opts.Headers...)
	}
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			attrs := make([]slog.Attr, 0, 9)
			attrs = append(attrs,
				slog.String("queue", job.Queue),
				slog.String("kind", job.Kind),
				slog.String("job_id", job.ID),
				slog.Int("attempt", job.Attempt()),
				slog.Int("recoveries", job.Recoveries),
			)
			if h := headerGroup(job, headers); h.Key != "" {
				attrs = append(attrs, h)
			}
			logger.LogAttrs(ctx, slog.LevelDebug, "job started", attrs...)

			n := &note{}
			start := time.Now()
			returned := false
			defer func() {
				if returned {
					return
				}
				// A panic on its way up: log without recovering, so that
				// Recover above still sees the panicking frames.
				end := append(attrs, slog.String("outcome", OutcomePanicked), durationAttr(start))
				logger.LogAttrs(ctx, slog.LevelError, "job panicked", end...)
			}()
			err := next.ProcessJob(withNote(ctx, n), job)
			returned = true

			end := attrs
			level, msg := slog.LevelInfo, "job done"
			switch {
			case err != nil:
				level, msg = slog.LevelWarn, "job failed"
				end = append(end, slog.String("outcome", OutcomeFailed), durationAttr(start), slog.Any("error", err))
			case n.outcome == OutcomePostponed:
				msg = "job postponed"
				end = append(end, slog.String("outcome", OutcomePostponed), durationAttr(start))
				if !n.at.IsZero() {
					end = append(end, slog.Time("run_at", n.at))
				}
			case n.outcome == OutcomeDuplicate:
				msg = "job skipped as duplicate"
				end = append(end, slog.String("outcome", OutcomeDuplicate), durationAttr(start))
			default:
				end = append(end, slog.String("outcome", OutcomeDone), durationAttr(start))
			}
			logger.LogAttrs(ctx, level, msg, end...)
			return err
		})
	}
}

func durationAttr(start time.Time) slog.Attr {
	return slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000)
}

// headerGroup returns the listed headers the job carries as a group, or a
// zero Attr when it carries none of them.
func headerGroup(job *conveyor.Job, names []string) slog.Attr {
	if len(names) == 0 || len(job.Headers) == 0 {
		return slog.Attr{}
	}
	var as []any
	for _, k := range names {
		if v, ok := job.Headers[k]; ok {
			as = append(as, slog.String(k, v))
		}
	}
	if len(as) == 0 {
		return slog.Attr{}
	}
	return slog.Group("headers", as...)
}

// note lets middleware below Logging say what became of a run that
// returned nil without being acked: postponed, or skipped as a duplicate.
// The chain runs in one goroutine, so it needs no lock.
type note struct {
	outcome string
	at      time.Time
}

type noteKey struct{}

func withNote(ctx context.Context, n *note) context.Context {
	return context.WithValue(ctx, noteKey{}, n)
}

// setNote records an outcome for a Logging above, if there is one.
func setNote(ctx context.Context, outcome string, at time.Time) {
	if n, ok := ctx.Value(noteKey{}).(*note); ok {
		n.outcome, n.at = outcome, at
	}
}
