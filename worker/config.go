package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// Config configures a Pool. The zero value is valid.
type Config struct {
	// Queue to consume. Defaults to "default".
	Queue string
	// Concurrency is the number of jobs run at once. Defaults to 10.
	Concurrency int
	// VisibilityTimeout is the lease of a fetched job. The pool extends the
	// leases of running jobs every HeartbeatInterval; a job whose worker
	// dies runs again after at most this long. Defaults to 30s.
	VisibilityTimeout time.Duration
	// HeartbeatInterval is how often leases of running jobs are extended.
	// Must be under VisibilityTimeout. Defaults to VisibilityTimeout/3.
	HeartbeatInterval time.Duration
	// ShutdownGrace is how long running jobs may finish after shutdown
	// starts. After it, their contexts are cancelled and the jobs are handed
	// back to the queue at once. Defaults to 10s.
	ShutdownGrace time.Duration
	// JobTimeout bounds one handler run unless the job sets its own Timeout.
	// Defaults to none.
	JobTimeout time.Duration
	// MaxAttempts caps handler runs of a job unless the job sets its own;
	// a failure on the last attempt discards the job. Defaults to 25.
	MaxAttempts int
	// Backoff returns the delay before retry number attempt (1 for the first
	// retry). Defaults to exponential from 1s, capped at 1h, with jitter.
	Backoff func(attempt int) time.Duration
	// Middleware wraps the handler, first outermost.
	Middleware []conveyor.Middleware
	// Logger receives the pool's logs. Defaults to discarding them.
	Logger *slog.Logger
	// NoPromoter turns off the delay.Promoter the pool runs for its queue
	// when the driver has timers (list, stream). A delayed job or a retry
	// waits for a promoter; turn it off only when other processes run one.
	NoPromoter bool
}

func (c Config) withDefaults() (Config, error) {
	if c.Queue == "" {
		c.Queue = "default"
	}
	if err := broker.ValidateQueue(c.Queue); err != nil {
		return c, fmt.Errorf("worker: Queue: %w", err)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = broker.DefaultVisibilityTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.VisibilityTimeout / 3
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 25
	}
	if c.Backoff == nil {
		c.Backoff = defaultBackoff
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Concurrency < 0:
		return c, errors.New("worker: Concurrency is negative")
	case c.VisibilityTimeout < 10*time.Millisecond:
		return c, errors.New("worker: VisibilityTimeout under 10ms")
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.VisibilityTimeout:
		return c, errors.New("worker: HeartbeatInterval must be positive and under VisibilityTimeout")
	case c.ShutdownGrace < 0 || c.JobTimeout < 0:
		return c, errors.New("worker: negative ShutdownGrace or JobTimeout")
	case c.MaxAttempts < 0:
		return c, errors.New("worker: MaxAttempts is negative")
	}
	return c, nil
}

// defaultBackoff is 2^(attempt-1) seconds capped at an hour, drawn uniformly
// from its upper half so that jobs failing together do not retry together.
func defaultBackoff(attempt int) time.Duration {
	d := time.Hour
	if attempt < 12 {
		d = time.Second << max(attempt-1, 0)
	}
	return d/2 + rand.N(d/2+1)
}
