package middleware

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/logs"
)

// RateLimitConfig configures RateLimit.
type RateLimitConfig struct {
	// Limit is how many jobs of one key may start in any window of Period.
	// Required.
	Limit int
	// Period is the window. At least 1ms. Defaults to 1s.
	Period time.Duration
	// Key returns the limiter key of a job: a tenant, a user, an IP, taken
	// from a header (see FromHeader) or the payload. Jobs with the same key
	// share one budget. A job whose key is "" is not limited. Defaults to
	// the job's kind.
	Key func(*conveyor.Job) string
	// Name tells limiters that share keys apart (a per-user limit per
	// second and another per day): each name has its own budgets. Defaults
	// to none.
	Name string
	// Prefix starts every key the limiter writes. Defaults to "conveyor".
	Prefix string
	// OnDecision, when set, is called after each decision, before the job
	// runs or is handed back; for metrics. It must not block.
	OnDecision func(job *conveyor.Job, d RateDecision)
	// Logger receives a Debug line for each job over the limit (queue,
	// kind, job_id, attempt, run_at; not the limiter key, which may be a
	// user or an IP). Defaults to slog.Default(), warnings and above only
	// (so none of these Debug lines).
	Logger *slog.Logger
}

// RateDecision is one admission decision of RateLimit.
type RateDecision struct {
	// Key is the limiter key of the job.
	Key string
	// Allowed says the job may start now.
	Allowed bool
	// At is, when Allowed, the admission time by the Redis server's clock;
	// otherwise the time the job was postponed to.
	At time.Time
}

// RateLimit lets at most Limit jobs of one key start in any window of
// Period, across every process that uses the same Redis, Prefix and Name.
// A job over the limit is handed back with Job.Postpone to run when a slot
// frees (plus a little jitter, so that the waiting jobs do not all come back
// at once): it is not a failed attempt, and RateLimit returns nil, the job
// being settled. An error from Redis fails the run (the pool's retry policy
// applies); the limiter never lets a job through unlimited.
//
// The limiter is a sliding-window log in a ZSET per key,
// <Prefix>:rl:{<h>} (or <Prefix>:rl:<Name>:{<h>}), h a hash of the limiter
// key (RateLimitRedisKey), decided by one Lua script on the server's clock;
// the key expires one Period after its last admission and holds at most
// Limit entries.
func RateLimit(rdb redis.UniversalClient, cfg *RateLimitConfig) (conveyor.Middleware, error) {
	if rdb == nil || cfg == nil {
		return nil, errors.New("middleware: RateLimit: nil client or config")
	}
	c := *cfg
	if c.Period == 0 {
		c.Period = time.Second
	}
	if c.Prefix == "" {
		c.Prefix = keys.DefaultPrefix
	}
	if c.Key == nil {
		c.Key = func(job *conveyor.Job) string { return job.Kind }
	}
	if c.Logger == nil {
		c.Logger = logs.Default()
	}
	switch {
	case c.Limit < 1:
		return nil, errors.New("middleware: RateLimit: Limit must be at least 1")
	case c.Period < time.Millisecond:
		return nil, errors.New("middleware: RateLimit: Period under 1ms")
	}
	if err := keys.ValidatePrefix(c.Prefix); err != nil {
		return nil, fmt.Errorf("middleware: RateLimit: %w", err)
	}
	if c.Name != "" {
		if err := broker.ValidateQueue(c.Name); err != nil {
			return nil, fmt.Errorf("middleware: RateLimit: invalid Name %q", c.Name)
		}
	}
	period := c.Period.Milliseconds()
	// Spread the jobs that wait for one slot over the time one slot takes.
	spread := c.Period / time.Duration(c.Limit)
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			key := c.Key(job)
			if key == "" {
				return next.ProcessJob(ctx, job)
			}
			v, err := rateLimitScript.Run(ctx, rdb, []string{RateLimitRedisKey(c.Prefix, c.Name, key)}, c.Limit, period, rand.Text())
			if err != nil {
				return fmt.Errorf("middleware: rate limit %q: %w", shown(key), err)
			}
			allowed, at, err := rateReply(v)
			if err != nil {
				return fmt.Errorf("middleware: rate limit %q: %w", shown(key), err)
			}
			if allowed {
				if c.OnDecision != nil {
					c.OnDecision(job, RateDecision{Key: key, Allowed: true, At: at})
				}
				return next.ProcessJob(ctx, job)
			}
			at = at.Add(mrand.N(spread + 1))
			if c.OnDecision != nil {
				c.OnDecision(job, RateDecision{Key: key, At: at})
			}
			if err := job.Postpone(ctx, at); err != nil {
				return fmt.Errorf("middleware: rate limit %q: postpone: %w", shown(key), err)
			}
			c.Logger.LogAttrs(ctx, slog.LevelDebug, "rate limited; job postponed",
				slog.String("queue", job.Queue), slog.String("kind", job.Kind), slog.String("job_id", job.ID),
				slog.Int("attempt", job.Attempt()), slog.Time("run_at", at))
			setNote(ctx, OutcomePostponed, at)
			return nil
		})
	}, nil
}

// rateReply reads ratelimit.lua's reply {allowed, unix ms}.
func rateReply(v any) (bool, time.Time, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return false, time.Time{}, fmt.Errorf("unexpected reply %v", v)
	}
	allowed, ok1 := a[0].(int64)
	ms, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return false, time.Time{}, fmt.Errorf("unexpected reply %v", v)
	}
	return allowed == 1, time.UnixMilli(ms), nil
}

// FromHeader returns a key function that reads the header name of a job,
// for RateLimitConfig.Key and IdempotencyConfig.Key. A job without the
// header has the key "".
func FromHeader(name string) func(*conveyor.Job) string {
	return func(job *conveyor.Job) string { return job.Headers[name] }
}
