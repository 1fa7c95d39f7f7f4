package middleware

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/logs"
)

// DefaultIdempotencyHeader is the header Idempotency reads its key from
// unless configured otherwise.
const DefaultIdempotencyHeader = "idempotency-key"

// IdempotencyConfig configures Idempotency. A nil *IdempotencyConfig means
// defaults.
type IdempotencyConfig struct {
	// Header names the header that carries a job's idempotency key.
	// Defaults to DefaultIdempotencyHeader. Ignored when Key is set.
	Header string
	// Key returns a job's idempotency key; it wins over Header. Jobs with
	// the same key run once. A job whose key is "" runs unguarded. Keys are
	// global to the Prefix: put the kind in the key when two kinds may carry
	// the same business key for different work.
	Key func(*conveyor.Job) string
	// Prefix starts every key the guard writes. Defaults to "conveyor".
	Prefix string
	// Lease is how long a run's claim on a key lasts without renewal; the
	// guard renews it every Lease/3 while the handler runs, so it only runs
	// out when the worker died. A job redelivered meanwhile waits for it.
	// At least 30ms. Defaults to 30s.
	Lease time.Duration
	// Retention is how long a finished key is remembered: a job with that
	// key arriving within it is acked without running. Defaults to 24h.
	Retention time.Duration
	// BusyDelay is how much later a job is postponed when another run holds
	// its key right now (less when the claim runs out sooner). Defaults to 1s.
	BusyDelay time.Duration
	// Logger receives the guard's records (duplicates skipped at Debug, a
	// key it could not mark or release at Warn). Defaults to
	// slog.Default(), warnings and above only.
	Logger *slog.Logger
}

// Idempotency runs a job's handler at most once per idempotency key within
// the retention window, for jobs that are enqueued twice or delivered again
// after a crash.
//
// Before the handler, the run claims the Redis key <Prefix>:idem:{<h>}, h
// a hash of the job's key (IdempotencyRedisKey), with SET NX PX Lease
// (value "running:<token>"). Then:
//   - the handler returns nil: the key becomes "done" for Retention before
//     Idempotency returns, so before the pool acks; a copy of the job that
//     is delivered again (its worker died between the two) finds "done" and
//     is acked without running;
//   - the handler fails or panics: the claim is deleted, if still this run's,
//     so that the retry can run;
//   - the key is "done" already: the handler does not run and Idempotency
//     returns nil (the pool acks the job);
//   - another run holds the key now: the job is postponed by BusyDelay with
//     Job.Postpone (not a failed attempt) and Idempotency returns nil.
//
// The guarantee has one gap, as every guard kept apart from the side effect
// has: a worker that dies after the side effect but before the key is marked
// done leaves a claim that expires after Lease, and the redelivered job runs
// again. A handler that makes its effect and the mark atomic (in the same
// Redis script or database transaction) closes it.
func Idempotency(rdb redis.UniversalClient, cfg *IdempotencyConfig) (conveyor.Middleware, error) {
	if rdb == nil {
		return nil, errors.New("middleware: Idempotency: nil client")
	}
	var c IdempotencyConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Header == "" {
		c.Header = DefaultIdempotencyHeader
	}
	if c.Key == nil {
		c.Key = FromHeader(c.Header)
	}
	if c.Prefix == "" {
		c.Prefix = keys.DefaultPrefix
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.BusyDelay == 0 {
		c.BusyDelay = time.Second
	}
	if c.Logger == nil {
		c.Logger = logs.Default()
	}
	switch {
	case c.Lease < 30*time.Millisecond:
		return nil, errors.New("middleware: Idempotency: Lease under 30ms")
	case c.Retention < time.Millisecond:
		return nil, errors.New("middleware: Idempotency: Retention under 1ms")
	case c.BusyDelay < 0:
		return nil, errors.New("middleware: Idempotency: negative BusyDelay")
	}
	if err := keys.ValidatePrefix(c.Prefix); err != nil {
		return nil, fmt.Errorf("middleware: Idempotency: %w", err)
	}
	g := &guard{rdb: rdb, cfg: c}
	return func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			return g.run(ctx, job, next)
		})
	}, nil
}

type guard struct {
	rdb redis.UniversalClient
	cfg IdempotencyConfig
}

// Claim states, as idempotency_begin.lua replies them.
const (
	claimRun  = "run"
	claimDone = "done"
	claimBusy = "busy"
)

func (g *guard) run(ctx context.Context, job *conveyor.Job, next conveyor.Handler) error {
	key := g.cfg.Key(job)
	if key == "" {
		return next.ProcessJob(ctx, job)
	}
	rk := IdempotencyRedisKey(g.cfg.Prefix, key)
	token := rand.Text()
	v, err := idemBeginScript.Run(ctx, g.rdb, []string{rk}, token, g.cfg.Lease.Milliseconds())
	if err != nil {
		return fmt.Errorf("middleware: idempotency %q: %w", shown(key), err)
	}
	state, pttl, err := claimReply(v)
	if err != nil {
		return fmt.Errorf("middleware: idempotency %q: %w", shown(key), err)
	}
	switch state {
	case claimDone:
		g.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "idempotency key done; job skipped",
			slog.String("job_id", job.ID), slog.String("key", shown(key)))
		setNote(ctx, OutcomeDuplicate, time.Time{})
		return nil
	case claimBusy:
		wait := g.cfg.BusyDelay
		if pttl > 0 && pttl < wait {
			wait = pttl
		}
		at := time.Now().Add(wait)
		if err := job.Postpone(ctx, at); err != nil {
			return fmt.Errorf("middleware: idempotency %q: postpone: %w", shown(key), err)
		}
		setNote(ctx, OutcomePostponed, at)
		return nil
	}

	stop := g.keep(ctx, rk, key, token)
	finished := false
	defer func() {
		stop()
		if finished {
			return
		}
		// Failed or panicking: let a retry claim the key. Our context may
		// be done (a timeout); the release must still reach Redis.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := idemReleaseScript.Run(rctx, g.rdb, []string{rk}, token); err != nil {
			g.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency key not released; a retry waits for its lease",
				slog.String("job_id", job.ID), slog.String("key", shown(key)), slog.Any("error", err))
		}
	}()
	if err := next.ProcessJob(ctx, job); err != nil {
		return err
	}
	if job.Settled() && !job.Acked() {
		// The handler handed the job back (Postpone, Retry) or discarded
		// it: its work is not done, so the key is released, not marked.
		return nil
	}
	stop()
	// Done before we return, so before the pool acks: a redelivery after a
	// crash between here and the ack finds "done".
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := g.rdb.Set(dctx, rk, claimDone, g.cfg.Retention).Err(); err != nil {
		// The handler's work is done; failing the run would only run it
		// again once the claim expires. Ack it, and say so.
		g.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency key not marked done; a duplicate after its lease would run",
			slog.String("job_id", job.ID), slog.String("key", shown(key)), slog.Any("error", err))
	}
	finished = true
	return nil
}

// keep renews the claim every Lease/3 until the returned stop is called;
// stop waits for the renewing goroutine to end and may be called again.
func (g *guard) keep(ctx context.Context, rk, key, token string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := g.cfg.Lease / 3
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			// The handler may run past its context (a timeout it ignores);
			// its claim must last as long as it does.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), every)
			v, err := idemExtendScript.Run(rctx, g.rdb, []string{rk}, token, g.cfg.Lease.Milliseconds())
			cancel()
			if err == nil && v == int64(0) {
				g.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency claim lost while the handler runs",
					slog.String("key", shown(key)))
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// claimReply reads idempotency_begin.lua's reply {state, pttl ms}.
func claimReply(v any) (string, time.Duration, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", 0, fmt.Errorf("unexpected reply %v", v)
	}
	state, ok1 := a[0].(string)
	pttl, ok2 := a[1].(int64)
	if !ok1 || !ok2 || (state != claimRun && state != claimDone && state != claimBusy) {
		return "", 0, fmt.Errorf("unexpected reply %v", v)
	}
	return state, time.Duration(pttl) * time.Millisecond, nil
}
