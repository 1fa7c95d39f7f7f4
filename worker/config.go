package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/logs"
	"github.com/conveyorq/conveyor/retry"
)

// Config configures a Pool. The zero value is valid.
type Config struct {
	// Queue to consume. Defaults to "default" unless Queues is set.
	Queue string
	// Queues, set instead of Queue, makes the pool serve several queues,
	// each with a weight from 1, for example {"critical": 6, "default": 3,
	// "low": 1}. Workers start the jobs of the queues that have some in
	// proportion to their weights (while all three above have a backlog,
	// 6 of every 10 jobs started are critical's, in a smooth round robin),
	// and a queue of the least weight is never starved. Each queue keeps a
	// buffer of fetched jobs, its weight's share of 2×Concurrency among the
	// queues that have jobs (two at least; Concurrency each under
	// StrictPriority), besides the pool's waiting room (Prefetch), and an
	// empty queue's fetch sleeps in Redis until a job arrives (list: no
	// round trip while it is empty). Handlers are routed by kind, whichever
	// queue a job came from (Job.Queue names it).
	Queues map[string]int
	// StrictPriority serves Queues in strict priority, the highest weight
	// first (weights must then differ): no job of a queue starts while a
	// queue of higher priority has jobs ready, apart from those the pool
	// held or was fetching when the higher queue's jobs arrived and before
	// its fetch brought them (its waiting room, a lower queue's buffer and
	// a fetch in flight: at most the room (see Prefetch)+2×Concurrency, a few in
	// practice). A lower
	// queue is fetched only while every higher one is empty, paused or at
	// its QueueConcurrency cap, so a busy high queue starves the lower ones
	// by design.
	StrictPriority bool
	// QueueConcurrency caps, per queue, how many of its jobs the pool holds
	// at once (running plus fetched ahead), within Concurrency: at most
	// that many run. Queues not named are capped by Concurrency alone.
	QueueConcurrency map[string]int
	// Concurrency is the number of jobs run at once. Defaults to 10.
	Concurrency int
	// Prefetch is how many fetched jobs the pool keeps waiting for its
	// workers, so that a fetch's round trip overlaps the jobs running: a
	// fetch asks for what the room lacks once three quarters of it is free.
	// A larger room makes fetches larger, and Redis's cost per job smaller:
	// 20 pools of concurrency 10 draining one queue moved about 1.7 times
	// the jobs per second with 32 (conveyor bench -workload e2e-split), and
	// a pool of 50 about 1.3 times with 100 (-workload e2e). Its price: the
	// pool holds up to Concurrency plus the room's leases, and their jobs in
	// memory, so a crash sends back more jobs, each with a recovery counted
	// (a poison job takes more down with it), and jobs fetched ahead wait
	// behind busy workers, for at most half a second before they go back
	// to the queue for another pool.
	//
	// Unset, the room of a pool of one queue starts at Concurrency and
	// adapts: while the queue has a backlog (fetches come back full) and
	// the workers empty the room before the next fetch's reply fills it,
	// each fetch grows it by half of Concurrency, up to 32 or twice
	// Concurrency, whichever is more; when jobs wait behind
	// busy workers and go back to the queue, it falls back to Concurrency.
	// So a pool of short jobs fetches in large batches and a pool of long
	// ones holds few leases. A pool of several queues (Queues, or a
	// QueueConcurrency cap on its queue) keeps its room at Concurrency:
	// its queues' buffers fetch ahead already, and a larger room would
	// take a lower queue's jobs under StrictPriority. Set, the room is
	// fixed at Prefetch.
	Prefetch int
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
	// JobTimeout bounds one handler run unless the job sets its own
	// Timeout: the handler's context is cancelled then, and the run counts
	// as a failure. A handler that ignores its context and has still not
	// returned a VisibilityTimeout later is abandoned: a new worker takes
	// its place, its lease is no longer extended, so the job runs again
	// elsewhere once the lease runs out (a recovery: a job that hangs its
	// worker MaxRecoveries times is discarded as poison), and the stuck
	// goroutine stops when its handler returns; abandoning happens within a
	// HeartbeatInterval of its time. A timeout you set (here or the job's)
	// is the deadline of the handler's context. Unset, it defaults to
	// DefaultJobTimeout (30m), which the pool's watchdog enforces within a
	// HeartbeatInterval without a deadline on the context, sparing each job
	// a timer: the context is then cancelled with cause
	// context.DeadlineExceeded. Negative: no timeout (a stuck handler then
	// holds its slot and its lease until the pool stops).
	JobTimeout time.Duration
	// Retry decides what becomes of a job whose handler failed and left it
	// unsettled: retried later through the queue's delay timers, or
	// discarded (see package retry for policies, per-kind and per-job
	// overrides). Defaults to rules built from MaxAttempts and Backoff;
	// setting Retry together with either of them is an error.
	Retry *retry.Rules
	// MaxAttempts caps handler runs of a job unless the job sets its own;
	// a failure on the last attempt discards the job. Shorthand for
	// Retry.MaxAttempts. Defaults to 25.
	MaxAttempts int
	// Backoff returns the delay before retry number attempt (1 for the first
	// retry). Shorthand for Retry.Policy. Defaults to retry.Exponential{}:
	// full jitter under a ceiling that doubles from 1s, capped at 1h.
	Backoff func(attempt int) time.Duration
	// Middleware wraps the handler, first outermost.
	Middleware []conveyor.Middleware
	// Logger receives the pool's logs. Defaults to slog.Default(),
	// warnings and above only: failed and discarded jobs, lost leases, Redis
	// errors. Set logs.Default() to silence the pool.
	Logger *slog.Logger
	// OnDiscard, when set, is called after each discard the pool or the
	// chain makes (Job.Discard, attempts used up, SkipRetry) is stored, with
	// the job and the reason. It runs synchronously, under a context that
	// outlives the handler's (10s); a panic in it is logged, not raised.
	// Discards the driver makes in its own scripts (poison: a lease expired
	// MaxRecoveries times; an undecodable stored message) never pass through
	// the pool and do not call it; they are in the discard queue all the
	// same (broker.Discards).
	OnDiscard func(ctx context.Context, job *conveyor.Job, reason string)
	// NoPromoter turns off the delay.Promoter the pool runs for each queue
	// when the driver has timers (list, stream). A delayed job or a retry
	// waits for a promoter; turn it off only when other processes run one.
	NoPromoter bool
	// OnPromote is the pool's promoter's delay.PromoterConfig.OnPromote:
	// called after each promotion call that moved timers (for metrics such
	// as promotion lateness). Defaults to none.
	OnPromote func(queue string, p broker.Promotion)
	// RegistryInterval is how often the pool renews its entry in the
	// fleet's registry of workers (broker.WorkerRegistry, read by
	// conveyor.Inspector.Workers): its host, process, queues, concurrency
	// and the jobs it runs. The entry lives three intervals, so a pool whose
	// process died leaves the registry within 3×RegistryInterval; one that
	// stops removes it at once. Each renewal is one SET. Defaults to 15s;
	// negative: the pool does not register. Ignored by a driver without a
	// registry.
	RegistryInterval time.Duration
	// Records keeps a record of each job the pool finishes (acked,
	// discarded, or cancelled) for this long: its outcome, attempt, times,
	// this pool's worker ID, the error that ended it and its result
	// (Job.SetResult), found with conveyor.Inspector.Job and listed as
	// conveyor.JobFinished (docs/results.md). The record is written by the
	// settle's own script call, so it costs a few more commands in that
	// call, not a round trip. A job's EnqueueOptions.Record wins over it.
	// 0: only the jobs that ask for one; otherwise at least 1ms. Ignored by
	// a driver without records (pubsub).
	Records time.Duration
	// QueueRecords sets Records per queue, for the queues named.
	QueueRecords map[string]time.Duration
	// HistoryEvery is how often the keeper of each queue (one pool of the
	// fleet, elected per queue) samples the queue's sizes and counters into
	// its history in Redis (conveyor.Inspector.History), which the
	// dashboard's charts and conveyor queues' rates read. Each sample costs
	// the keeper two script calls and about 45 bytes of Redis memory
	// until HistoryKeep drops it; the interval is the server's, so pools
	// agree on it, and a hand-over of the keeper stores one sample, not
	// two. Defaults to a minute; from broker.MinHistoryEvery; negative: this
	// pool records none (another pool that becomes keeper still does).
	// Ignored by a driver without history (pubsub).
	HistoryEvery time.Duration
	// HistoryKeep is how long samples are kept: a day by default; at least
	// HistoryEvery. A day of samples a minute apart is 1,440 per queue.
	HistoryKeep time.Duration

	// roomMax is the most the waiting room grows to: Prefetch when set,
	// else the larger of 2×Concurrency and adaptiveRoomMax (see Prefetch).
	roomMax int
}

// adaptiveRoomMax is the most an unset Prefetch's room grows to, or twice
// Concurrency when that is more. Fetches of that size cost Redis a small
// share of a job each: a list fetch costs Redis about what four jobs in it
// do (docs/performance.md). With it 20 pools of 10 move about what one
// pool of 200 moves, and a pool of 50 about 1.3 times what a room of 50
// moved (conveyor bench -workload e2e-split, e2e).
const adaptiveRoomMax = 32

// DefaultHistoryEvery and DefaultHistoryKeep are the defaults of
// Config.HistoryEvery and Config.HistoryKeep.
const (
	DefaultHistoryEvery = time.Minute
	DefaultHistoryKeep  = 24 * time.Hour
)

// checkQueues validates Queues, StrictPriority and QueueConcurrency.
func (c *Config) checkQueues() error {
	seen := make(map[int]string, len(c.Queues))
	for q, w := range c.Queues {
		if err := broker.ValidateQueue(q); err != nil {
			return fmt.Errorf("worker: Queues: %w", err)
		}
		if w < 1 {
			return fmt.Errorf("worker: Queues: queue %q has weight %d; weights start at 1", q, w)
		}
		if other, ok := seen[w]; ok && c.StrictPriority {
			return fmt.Errorf("worker: StrictPriority: queues %q and %q share priority %d", min(q, other), max(q, other), w)
		}
		seen[w] = q
	}
	if c.StrictPriority && len(c.Queues) == 0 {
		return errors.New("worker: StrictPriority needs Queues")
	}
	for q, d := range c.QueueRecords {
		if _, ok := c.Queues[q]; !ok && q != c.Queue {
			return fmt.Errorf("worker: QueueRecords: the pool does not serve queue %q", q)
		}
		if err := checkRecords(d); err != nil {
			return fmt.Errorf("worker: QueueRecords: queue %q: %w", q, err)
		}
	}
	for q, n := range c.QueueConcurrency {
		if _, ok := c.Queues[q]; !ok && q != c.Queue {
			return fmt.Errorf("worker: QueueConcurrency: the pool does not serve queue %q", q)
		}
		if n < 1 || n > c.Concurrency {
			return fmt.Errorf("worker: QueueConcurrency: queue %q capped at %d, outside 1..Concurrency (%d)", q, n, c.Concurrency)
		}
	}
	return nil
}

// laneSpecs returns the queues of a pool that needs lanes (several queues,
// or a cap under Concurrency), strict priority's highest first, else by
// name; nil for a pool of one uncapped queue.
func (c *Config) laneSpecs() []laneSpec {
	var qs []laneSpec
	if c.Queue != "" {
		if n, ok := c.QueueConcurrency[c.Queue]; ok && n < c.Concurrency {
			return []laneSpec{{name: c.Queue, weight: 1, cap: n}}
		}
		return nil
	}
	for q, w := range c.Queues {
		qs = append(qs, laneSpec{name: q, weight: w, cap: c.QueueConcurrency[q]})
	}
	slices.SortFunc(qs, func(a, b laneSpec) int {
		if c.StrictPriority && a.weight != b.weight {
			return cmp.Compare(b.weight, a.weight)
		}
		return strings.Compare(a.name, b.name)
	})
	return qs
}

// queueNames returns the queues the pool serves.
func (c *Config) queueNames() []string {
	if c.Queue != "" {
		return []string{c.Queue}
	}
	var qs []string
	for _, l := range c.laneSpecs() {
		qs = append(qs, l.name)
	}
	return qs
}

// DefaultRegistryInterval is Config.RegistryInterval's default.
const DefaultRegistryInterval = 15 * time.Second

// DefaultJobTimeout bounds a handler run when neither Config.JobTimeout nor
// the job sets a timeout.
const DefaultJobTimeout = 30 * time.Minute

func (c Config) withDefaults() (Config, error) {
	if c.Queue != "" && len(c.Queues) > 0 {
		return c, errors.New("worker: set Queue or Queues, not both")
	}
	if c.Queue == "" && len(c.Queues) == 0 {
		c.Queue = "default"
	}
	if c.Queue != "" {
		if err := broker.ValidateQueue(c.Queue); err != nil {
			return c, fmt.Errorf("worker: Queue: %w", err)
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	adapt := c.Prefetch == 0
	if adapt {
		c.Prefetch = c.Concurrency
	}
	if err := c.checkQueues(); err != nil {
		return c, err
	}
	if err := checkRecords(c.Records); err != nil {
		return c, fmt.Errorf("worker: Records: %w", err)
	}
	if len(c.Queues) == 1 {
		for q := range c.Queues {
			c.Queue, c.Queues, c.StrictPriority = q, nil, false
		}
	}
	c.roomMax = c.Prefetch
	if adapt && c.laneSpecs() == nil {
		c.roomMax = max(2*c.Concurrency, adaptiveRoomMax)
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
	if c.RegistryInterval == 0 {
		c.RegistryInterval = DefaultRegistryInterval
	}
	if c.HistoryEvery == 0 {
		c.HistoryEvery = DefaultHistoryEvery
	}
	if c.HistoryKeep == 0 {
		c.HistoryKeep = max(DefaultHistoryKeep, c.HistoryEvery)
	}
	if c.HistoryEvery > 0 {
		if err := broker.ValidateHistory(c.HistoryEvery, c.HistoryKeep); err != nil {
			return c, fmt.Errorf("worker: HistoryEvery, HistoryKeep: %w", err)
		}
	}
	if c.Retry != nil && (c.MaxAttempts != 0 || c.Backoff != nil) {
		return c, errors.New("worker: set MaxAttempts and Backoff in Retry, not beside it")
	}
	if c.Retry == nil {
		c.Retry = &retry.Rules{MaxAttempts: c.MaxAttempts}
		if backoff := c.Backoff; backoff != nil {
			c.Retry.Policy = retry.Func(func(attempt int, _ error) time.Duration { return backoff(attempt) })
		}
	}
	if err := c.Retry.Validate(); err != nil {
		return c, fmt.Errorf("worker: Retry: %w", err)
	}
	if c.Logger == nil {
		c.Logger = logs.Default()
	}
	switch {
	case c.Concurrency < 0:
		return c, errors.New("worker: Concurrency is negative")
	case c.Prefetch < 0:
		return c, errors.New("worker: Prefetch is negative")
	case c.VisibilityTimeout < 10*time.Millisecond:
		return c, errors.New("worker: VisibilityTimeout under 10ms")
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.VisibilityTimeout:
		return c, errors.New("worker: HeartbeatInterval must be positive and under VisibilityTimeout")
	case c.ShutdownGrace < 0:
		return c, errors.New("worker: negative ShutdownGrace")
	}
	return c, nil
}

// checkRecords validates a record retention: 0 (none) or from 1ms.
func checkRecords(d time.Duration) error {
	if d < 0 || (d > 0 && d < time.Millisecond) {
		return fmt.Errorf("record retention %v: want 0 or at least 1ms", d)
	}
	return nil
}
