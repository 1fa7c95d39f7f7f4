package conveyortest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/runjob"
	"github.com/conveyorq/conveyor/retry"
)

// ErrNoJobReady is returned by Runner.Work when the queue has no job ready
// to run (by the driver's clock).
var ErrNoJobReady = errors.New("conveyortest: no job ready")

// DefaultMaxRuns is how many jobs one Runner.Drain runs at most unless
// RunnerConfig.MaxRuns says otherwise.
const DefaultMaxRuns = 10000

// RunnerConfig configures a Runner. The zero value is valid.
type RunnerConfig struct {
	// Middleware wraps the handler, first outermost, as
	// worker.Config.Middleware does.
	Middleware []conveyor.Middleware
	// Retry decides what becomes of a job whose handler failed and left it
	// unsettled, as worker.Config.Retry does; its clock defaults to the
	// driver's, so a retry comes due when the test advances the clock past
	// its backoff. Defaults to retry.Rules{} (25 attempts, exponential
	// backoff with full jitter): give a retry.Constant policy for retry
	// times a test can predict.
	Retry *retry.Rules
	// VisibilityTimeout is the lease of a job the runner runs. Defaults to
	// broker.DefaultVisibilityTimeout (30s) by the driver's clock.
	VisibilityTimeout time.Duration
	// MaxRuns caps the jobs one Drain runs, so that a handler that keeps
	// handing its job back for at once ends the test instead of hanging
	// it. Defaults to DefaultMaxRuns.
	MaxRuns int
}

// Runner runs jobs of a Driver through a handler inline, in the calling
// goroutine, the way a worker.Pool runs each one: the middleware chain
// then the handler, a panic turned into an error with its stack, the job's
// own Timeout as its context's deadline, and what the chain left unsettled
// settled by the pool's rules (nil: ack; an error: retry with backoff, or
// discard after the last attempt or for conveyor.SkipRetry). It calls the
// job's OnFinish observers with the settlement, as the pool does, so
// tracing and metrics middleware see the outcome. It is safe for
// concurrent use: goroutines calling Work or Drain at once run jobs at
// once, as a pool's workers do, and the jobs of a FIFO group
// (EnqueueOptions.Group) still run their group's limit at a time, in
// enqueue order, and a concurrency limit (Driver.SetLimit) holds across
// them as across a fleet.
//
// A Runner does not heartbeat leases, batch acks or hand jobs back on
// shutdown: put the Driver under a worker.Pool to test those.
type Runner struct {
	d       *Driver
	h       conveyor.Handler
	client  *conveyor.Client
	rules   *retry.Rules
	vt      time.Duration
	maxRuns int

	mu   sync.Mutex
	cons map[string]*consumer
}

// NewRunner returns a runner of d's jobs through h (usually the
// application's *worker.Mux) wrapped in cfg's middleware.
func NewRunner(d *Driver, h conveyor.Handler, cfg *RunnerConfig) (*Runner, error) {
	if d == nil || h == nil {
		return nil, errors.New("conveyortest: NewRunner needs a driver and a handler")
	}
	if cfg == nil {
		cfg = &RunnerConfig{}
	}
	if cfg.VisibilityTimeout < 0 || cfg.MaxRuns < 0 {
		return nil, fmt.Errorf("conveyortest: VisibilityTimeout %v, MaxRuns %d: must not be negative", cfg.VisibilityTimeout, cfg.MaxRuns)
	}
	var rules retry.Rules
	if cfg.Retry != nil {
		rules = *cfg.Retry
	}
	if rules.Now == nil {
		rules.Now = d.Now
	}
	if err := rules.Validate(); err != nil {
		return nil, fmt.Errorf("conveyortest: retry rules: %w", err)
	}
	client, err := NewClient(d, nil)
	if err != nil {
		return nil, err
	}
	r := &Runner{
		d:       d,
		h:       conveyor.Chain(cfg.Middleware...)(h),
		client:  client,
		rules:   &rules,
		vt:      cfg.VisibilityTimeout,
		maxRuns: cfg.MaxRuns,
		cons:    map[string]*consumer{},
	}
	if r.maxRuns == 0 {
		r.maxRuns = DefaultMaxRuns
	}
	return r, nil
}

// Result is how one run of a job went.
type Result struct {
	// Job is the job as the handler saw it.
	Job *conveyor.Job
	// Err is what the middleware chain returned: nil, the handler's error,
	// or a panic's value and stack.
	Err error
	// Settlement is what became of the job: acked, retried (At says
	// when), postponed, discarded (Reason says why), or why settling
	// failed.
	Settlement conveyor.Settlement
}

// consumer returns the runner's consumer of queue.
func (r *Runner) consumer(ctx context.Context, queue string) (*consumer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.cons[queue]; c != nil {
		return c, nil
	}
	c, err := r.d.Open(ctx, queue, &broker.ConsumerOptions{VisibilityTimeout: r.vt})
	if err != nil {
		return nil, err
	}
	r.cons[queue] = c.(*consumer)
	return r.cons[queue], nil
}

// Process enqueues one job of kind with args (as conveyor.Client.Enqueue
// does, on the driver's clock) and runs that job at once, whatever else
// its queue holds. A job enqueued with a Delay or RunAt ahead is refused:
// enqueue it, Advance the clock, and Drain. A job of a group
// (EnqueueOptions.Group) whose group has no room stays enqueued, waiting
// in the group's line, and Process fails: Drain runs it in its turn. So
// does a job that finds a concurrency limit full (Driver.SetLimit): it
// waits in the limit's line until a running job under the limit ends.
func (r *Runner) Process(ctx context.Context, kind string, args any, opts *conveyor.EnqueueOptions) (*Result, error) {
	if opts != nil && (opts.Delay > 0 || opts.RunAt.After(r.d.Now())) {
		return nil, errors.New("conveyortest: Process runs a job at once; a delayed job is run by Drain once the clock reaches it")
	}
	m, err := r.client.Enqueue(ctx, kind, args, opts)
	if err != nil {
		return nil, err
	}
	c, err := r.consumer(ctx, m.Queue)
	if err != nil {
		return nil, err
	}
	ds, _, _ := c.lease(1, m.ID)
	if len(ds) == 0 {
		if g, ok := r.d.waitsInLine(m.Queue, m.ID); ok {
			return nil, fmt.Errorf("conveyortest: job %s of queue %q waits in the line of group %q until an earlier job of it ends: Drain runs it in its turn", m.ID, m.Queue, g)
		}
		if class, ok := r.d.waitsForSlot(m.Queue, m.ID); ok {
			return nil, fmt.Errorf("conveyortest: job %s of queue %q waits for a slot of %s until a running job under it ends: Drain runs it in its turn", m.ID, m.Queue, limitName(class))
		}
		return nil, fmt.Errorf("conveyortest: job %s of queue %q vanished before it ran", m.ID, m.Queue)
	}
	return r.run(ctx, c, ds[0]), nil
}

// Work promotes queue's due timers (by the driver's clock) and runs the
// next ready job. It returns ErrNoJobReady when there is none.
func (r *Runner) Work(ctx context.Context, queue string) (*Result, error) {
	c, err := r.consumer(ctx, queue)
	if err != nil {
		return nil, err
	}
	if _, err := r.d.Promote(ctx, queue, maxPage); err != nil {
		return nil, err
	}
	ds, _, _ := c.lease(1, "")
	if len(ds) == 0 {
		return nil, ErrNoJobReady
	}
	return r.run(ctx, c, ds[0]), nil
}

// Drain runs queue's jobs, one after another, until none is ready by the
// driver's clock, and returns their results in the order they ran. A job
// retried for later, postponed or enqueued with a delay waits for the
// clock: Advance it and Drain again. It fails after RunnerConfig.MaxRuns
// runs, with the results so far.
func (r *Runner) Drain(ctx context.Context, queue string) ([]*Result, error) {
	var out []*Result
	for {
		if len(out) == r.maxRuns {
			return out, fmt.Errorf("conveyortest: drain of %q: %d jobs run and more ready (RunnerConfig.MaxRuns)", queue, len(out))
		}
		res, err := r.Work(ctx, queue)
		if errors.Is(err, ErrNoJobReady) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
}

// run runs one delivery through the chain and settles it as the pool does.
func (r *Runner) run(ctx context.Context, c *consumer, dl *broker.Delivery) *Result {
	st := &settler{c: c, started: c.d.Now()}
	job := conveyor.NewJob(dl, st)
	st.job = job
	hctx := ctx
	if dl.Timeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, dl.Timeout)
		defer cancel()
	}
	herr := runjob.Call(hctx, r.h, job)
	var s conveyor.Settlement
	switch {
	case job.Settled():
		s = job.Settlement()
	case herr == nil:
		s = runjob.Settled(conveyor.Settlement{Outcome: conveyor.OutcomeAcked}, job.Ack(ctx))
	default:
		_, err := r.rules.Settle(ctx, job, herr)
		s = job.Settlement()
		if !job.Settled() {
			s = runjob.Settled(s, cmp.Or(err, runjob.ErrLeftUnsettled))
		}
	}
	conveyor.FinishJob(job, s)
	return &Result{Job: job, Err: herr, Settlement: s}
}

// settler carries out a job's settle calls on its consumer. A job enqueued
// with EnqueueOptions.Record gets its record with its ack or discard, as a
// pool writes it.
type settler struct {
	c       *consumer
	job     *conveyor.Job
	started time.Time
}

// finish returns the record request of the job ending with outcome and
// err, nil when the job asks for none.
func (s *settler) finish(d *broker.Delivery, outcome, err string) *broker.FinishRecord {
	keep, ok := conveyor.RecordOf(&d.Message)
	if !ok {
		return nil
	}
	return &broker.FinishRecord{Keep: keep, Record: broker.JobRecord{
		Queue: d.Queue, Kind: d.Kind, Outcome: outcome, Attempt: d.Attempt(), Recoveries: d.Recoveries,
		EnqueuedAt: d.EnqueuedAt, StartedAt: s.started, Worker: "conveyortest", Error: err, Result: s.job.Result(),
	}}
}

func (s *settler) Ack(ctx context.Context, d *broker.Delivery) error {
	d.Finish = s.finish(d, "acked", "")
	return s.c.Ack(ctx, d)
}
func (s *settler) Retry(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return s.c.Retry(ctx, d, at)
}
func (s *settler) Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return s.c.Postpone(ctx, d, at)
}
func (s *settler) Discard(ctx context.Context, d *broker.Delivery, reason string) error {
	d.Finish = s.finish(d, "discarded", reason)
	return s.c.Discard(ctx, d, reason)
}
func (s *settler) Extend(ctx context.Context, d *broker.Delivery, ttl time.Duration) error {
	return s.c.Extend(ctx, ttl, d)
}
