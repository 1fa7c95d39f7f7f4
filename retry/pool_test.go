package retry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

// These tests run real pools on a real Redis, with each at-least-once
// driver.

var drivers = drivertest.Durable

const queue = "q"

type env struct {
	rdb    redis.UniversalClient
	prefix string
	d      broker.Driver
	client *conveyor.Client
	logs   *logSink
}

func newEnv(t *testing.T, i int) *env {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d := drivers[i].Must(t, rdb, prefix)
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	return &env{rdb: rdb, prefix: prefix, d: d, client: c, logs: newLogSink()}
}

func (e *env) key(part string) string { return keys.Queue(e.prefix, queue).Part(part) }

func (e *env) enqueue(t *testing.T, kind, id string, opts *conveyor.EnqueueOptions) {
	t.Helper()
	if opts == nil {
		opts = &conveyor.EnqueueOptions{}
	}
	opts.ID = id
	if _, err := e.client.Enqueue(context.Background(), kind, nil, opts); err != nil {
		t.Fatal(err)
	}
}

// start runs a pool for h with cfg (Queue and Logger filled in) and returns
// a func that stops it and waits; the test's cleanup calls it too.
func (e *env) start(t *testing.T, h conveyor.Handler, cfg worker.Config) (stop func()) {
	t.Helper()
	cfg.Queue = queue
	cfg.Logger = slog.New(e.logs)
	p, err := worker.NewPool(e.d, h, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return drivertest.Background(t, p.Run)
}

// dead reads the discard queue, by message ID.
func (e *env) dead(t *testing.T) map[string]deadJob {
	t.Helper()
	raw, err := e.rdb.LRange(context.Background(), e.key("dead"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]deadJob{}
	for _, r := range raw {
		d, err := codec.DecodeDiscarded([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		var m broker.Message
		if _, err := codec.Decode(d.Message, &m); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[m.ID]; dup {
			t.Errorf("job %s discarded twice", m.ID)
		}
		out[m.ID] = deadJob{Discarded: d, msg: m}
	}
	return out
}

type deadJob struct {
	codec.Discarded
	msg broker.Message
}

// assertOnlyKeys fails unless the keys under the test's prefix are exactly
// those of parts: nothing ready, in flight or waiting as a timer.
func (e *env) assertOnlyKeys(t *testing.T, parts ...string) {
	t.Helper()
	want := make([]string, len(parts))
	for i, p := range parts {
		want[i] = e.key(p)
	}
	got := redistest.Keys(t, e.rdb, e.prefix)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("keys left in Redis: %v, want %v", got, want)
	}
}

// logSink keeps the pool's log records so a test can wait for one (the pool
// logs "job discarded" once the discard is in Redis) and check what the
// pool did.
type logSink struct {
	mu      sync.Mutex
	recs    []slog.Record
	changed chan struct{}
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *logSink) WithGroup(string) slog.Handler            { return s }
func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r.Clone())
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// count returns how many records have message msg, and a channel closed at
// the next record.
func (s *logSink) count(msg string) (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if r.Message == msg {
			n++
		}
	}
	return n, s.changed
}

// ints returns, for each record with message msg in order, its int
// attribute key.
func (s *logSink) ints(msg, key string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	for _, r := range s.recs {
		if r.Message != msg {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				out = append(out, a.Value.Int64())
			}
			return true
		})
	}
	return out
}

func (s *logSink) wait(t *testing.T, msg string, n int, within time.Duration) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		got, changed := s.count(msg)
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%d %q log records after %v, want %d", got, msg, within, n)
		}
	}
}

// runLog is what a handler saw of each run of each job.
type runLog struct {
	mu   sync.Mutex
	runs map[string][]run
}

type run struct {
	attempt    int
	start, end time.Time // wall clock, the clock Redis timers run on
}

func newRunLog() *runLog { return &runLog{runs: map[string][]run{}} }

// begin records the start of a run and returns its index.
func (l *runLog) begin(job *conveyor.Job) int {
	now := time.Now().Round(0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[job.ID] = append(l.runs[job.ID], run{attempt: job.Retries, start: now})
	return len(l.runs[job.ID]) - 1
}

func (l *runLog) end(job *conveyor.Job, i int) {
	now := time.Now().Round(0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[job.ID][i].end = now
}

func (l *runLog) get(id string) []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs[id])
}

// delayLog records the delay a policy chose for each failed run, by the
// error's text (which names the job and the run).
type delayLog struct {
	mu     sync.Mutex
	delays map[string]time.Duration
	by     map[string]string // error text -> the name of the policy that chose
}

func newDelayLog() *delayLog {
	return &delayLog{delays: map[string]time.Duration{}, by: map[string]string{}}
}

// wrap returns p, recording its choices under name.
func (l *delayLog) wrap(name string, p retry.Policy) retry.Policy {
	return retry.Func(func(attempt int, err error) time.Duration {
		d := p.Delay(attempt, err)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.delays[err.Error()] = d
		l.by[err.Error()] = name
		return d
	})
}

func (l *delayLog) get(errText string) (time.Duration, string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.delays[errText]
	return d, l.by[errText], ok
}

func failure(job *conveyor.Job) error {
	return fmt.Errorf("job %s run %d failed", job.ID, job.Retries+1)
}

// TestFailThreeTimesThenSucceed is the acceptance test: 1,000 jobs
// that fail three times and then succeed run exactly four times each, and
// each retry waits at least the delay its policy chose (timers are never
// early), a delay inside the policy's bounds.
func TestFailThreeTimesThenSucceed(t *testing.T) {
	t.Parallel()
	const n = 1000
	policies := []struct {
		name string
		p    retry.Policy
		// ceiling is the policy's upper bound for the delay after failed
		// run number attempt; floor its lower bound.
		floor   time.Duration
		ceiling func(attempt int) time.Duration
	}{
		{"constant", retry.Constant(20 * time.Millisecond), 20 * time.Millisecond, func(int) time.Duration { return 20 * time.Millisecond }},
		{"exponential", retry.Exponential{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond, Rand: retry.SeededRand(4)}, 0,
			retry.Exponential{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}.Ceiling},
	}
	for i, drv := range drivers {
		for _, pol := range policies {
			t.Run(drv.Name+"/"+pol.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, i)
				ctx := context.Background()
				runs, delays := newRunLog(), newDelayLog()
				var succeeded atomic.Int32
				allDone := make(chan struct{})
				h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
					r := runs.begin(job)
					defer runs.end(job, r)
					if job.Retries < 3 {
						return failure(job)
					}
					if succeeded.Add(1) == n {
						close(allDone)
					}
					return nil
				})
				reqs := make([]conveyor.Request, n)
				for j := range reqs {
					reqs[j] = conveyor.Request{Kind: "flaky", Opts: &conveyor.EnqueueOptions{ID: fmt.Sprintf("job-%04d", j)}}
				}
				if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
					t.Fatal(err)
				}
				began := time.Now()
				stop := e.start(t, h, worker.Config{
					Concurrency: 64,
					Retry:       &retry.Rules{Policy: delays.wrap(pol.name, pol.p), MaxAttempts: 10},
				})
				waitFor(t, "1,000 successes", 60*time.Second, allDone)
				took := time.Since(began)
				stop()

				var maxGap, maxLate, sumLate time.Duration
				gaps := 0
				for j := range n {
					id := fmt.Sprintf("job-%04d", j)
					rs := runs.get(id)
					if len(rs) != 4 {
						t.Fatalf("job %s ran %d times, want 4", id, len(rs))
					}
					for k, r := range rs {
						if r.attempt != k {
							t.Fatalf("job %s: run %d has Retries %d, want %d", id, k+1, r.attempt, k)
						}
					}
					for k := range 3 {
						errText := fmt.Sprintf("job %s run %d failed", id, k+1)
						delay, _, ok := delays.get(errText)
						if !ok {
							t.Fatalf("no delay chosen for %q", errText)
						}
						if delay < pol.floor || delay > pol.ceiling(k+1) {
							t.Fatalf("%s: delay %v outside the policy's [%v, %v]", errText, delay, pol.floor, pol.ceiling(k+1))
						}
						gap := rs[k+1].start.Sub(rs[k].end)
						if gap < delay {
							t.Fatalf("%s: next run %v after it returned, before the %v chosen (early)", errText, gap, delay)
						}
						if gap > 5*time.Second {
							t.Fatalf("%s: next run %v after it returned (delay %v)", errText, gap, delay)
						}
						maxGap, maxLate, sumLate = max(maxGap, gap), max(maxLate, gap-delay), sumLate+gap-delay
						gaps++
					}
				}
				t.Logf("%d jobs × 4 runs in %v; retry gaps: max %v; gap minus the chosen delay (timer lateness plus waiting behind other ready jobs): mean %v, max %v",
					n, took.Round(time.Millisecond), maxGap, sumLate/time.Duration(gaps), maxLate)
				if c, _ := e.logs.count("job discarded"); c != 0 {
					t.Fatalf("%d jobs discarded, want none", c)
				}
				e.assertOnlyKeys(t) // nothing ready, in flight or waiting
			})
		}
	}
}

// TestOverrides: the job's MaxAttempts wins over its kind's, which wins over
// the default; a policy named in the job's header wins over the kind's,
// which wins over the default; an unknown name falls back.
func TestOverrides(t *testing.T) {
	t.Parallel()
	for i, drv := range drivers {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			runs, delays := newRunLog(), newDelayLog()
			quick := retry.Constant(5 * time.Millisecond)
			rules := &retry.Rules{
				Policy:      delays.wrap("default", quick),
				MaxAttempts: 5,
				Kinds:       map[string]retry.Override{"few": {Policy: delays.wrap("kind", quick), MaxAttempts: 2}},
				Policies:    map[string]retry.Policy{"tagged": delays.wrap("tagged", quick)},
			}
			tag := func(name string) map[string]string { return map[string]string{retry.Header: name} }
			jobs := []struct {
				id, kind string
				opts     conveyor.EnqueueOptions
				runs     int
				policy   string
			}{
				{"kind-cap", "few", conveyor.EnqueueOptions{}, 2, "kind"},
				{"job-cap-over-kind", "few", conveyor.EnqueueOptions{MaxAttempts: 3}, 3, "kind"},
				{"default-cap", "other", conveyor.EnqueueOptions{}, 5, "default"},
				{"job-cap-over-default", "other", conveyor.EnqueueOptions{MaxAttempts: 1}, 1, ""},
				{"header-over-kind", "few", conveyor.EnqueueOptions{Headers: tag("tagged")}, 2, "tagged"},
				{"header-over-default", "other", conveyor.EnqueueOptions{Headers: tag("tagged"), MaxAttempts: 3}, 3, "tagged"},
				{"unknown-header", "other", conveyor.EnqueueOptions{Headers: tag("nope")}, 5, "default"},
			}
			for _, j := range jobs {
				e.enqueue(t, j.kind, j.id, &j.opts)
			}
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				r := runs.begin(job)
				defer runs.end(job, r)
				return failure(job)
			})
			stop := e.start(t, h, worker.Config{Concurrency: 4, Retry: rules})
			e.logs.wait(t, "job discarded", len(jobs), 30*time.Second)
			stop()
			dead := e.dead(t)
			for _, j := range jobs {
				if got := len(runs.get(j.id)); got != j.runs {
					t.Errorf("%s ran %d times, want %d", j.id, got, j.runs)
				}
				for k := 1; k < j.runs; k++ {
					_, by, ok := delays.get(fmt.Sprintf("job %s run %d failed", j.id, k))
					if !ok || by != j.policy {
						t.Errorf("%s: retry %d delayed by policy %q, want %q", j.id, k, by, j.policy)
					}
				}
				d, ok := dead[j.id]
				if want := fmt.Sprintf("job %s run %d failed", j.id, j.runs); !ok || d.Reason != want || d.msg.Retries != j.runs-1 {
					t.Errorf("%s: discard record %q (Retries %d, found %v), want reason %q, Retries %d", j.id, d.Reason, d.msg.Retries, ok, want, j.runs-1)
				}
			}
			e.assertOnlyKeys(t, "dead")
		})
	}
}

// TestSkipRetryAndRetryAfter: SkipRetry discards at once whatever attempts
// are left; RetryAfter waits the delay it names instead of the policy's,
// and counts an attempt (the job still ends after MaxAttempts runs).
func TestSkipRetryAndRetryAfter(t *testing.T) {
	t.Parallel()
	const after = 300 * time.Millisecond
	for i, drv := range drivers {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			runs := newRunLog()
			e.enqueue(t, "skip", "skip", nil)
			e.enqueue(t, "after", "after", nil)
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				r := runs.begin(job)
				defer runs.end(job, r)
				if job.Kind == "skip" {
					return conveyor.SkipRetry(errors.New("bad input"))
				}
				return conveyor.RetryAfter(after, failure(job))
			})
			// The policy's delay (an hour) would outlast the test: only
			// RetryAfter can bring the job back in time.
			stop := e.start(t, h, worker.Config{Retry: &retry.Rules{Policy: retry.Constant(time.Hour), MaxAttempts: 3}})
			e.logs.wait(t, "job discarded", 2, 30*time.Second)
			stop()
			dead := e.dead(t)

			if got := len(runs.get("skip")); got != 1 {
				t.Errorf("SkipRetry job ran %d times, want 1", got)
			}
			if d := dead["skip"]; d.Reason != "bad input" || d.msg.Retries != 0 {
				t.Errorf("SkipRetry job discarded with %q, Retries %d; want %q, 0", d.Reason, d.msg.Retries, "bad input")
			}

			rs := runs.get("after")
			if len(rs) != 3 {
				t.Fatalf("RetryAfter job ran %d times, want 3 (MaxAttempts)", len(rs))
			}
			for k := range 2 {
				if rs[k+1].attempt != k+1 {
					t.Errorf("run %d has Retries %d, want %d (RetryAfter counts an attempt)", k+2, rs[k+1].attempt, k+1)
				}
				if gap := rs[k+1].start.Sub(rs[k].end); gap < after || gap > 5*time.Second {
					t.Errorf("retry %d came %v after the failure, want at least %v (and under 5s)", k+1, gap, after)
				}
			}
			if d := dead["after"]; d.Reason != "job after run 3 failed" || d.msg.Retries != 2 {
				t.Errorf("RetryAfter job discarded with %q, Retries %d; want the last error, Retries 2", d.Reason, d.msg.Retries)
			}
			e.assertOnlyKeys(t, "dead")
		})
	}
}

// TestExhaustedAttemptsGoToDiscardQueue: a job that always fails runs
// MaxAttempts times and ends in the discard queue, the last error its
// reason, with when and how many attempts it had. The log records of its
// failures number the attempts as the discard record does.
func TestExhaustedAttemptsGoToDiscardQueue(t *testing.T) {
	t.Parallel()
	for i, drv := range drivers {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			runs := newRunLog()
			began := time.Now()
			e.enqueue(t, "doomed", "doomed", &conveyor.EnqueueOptions{Headers: map[string]string{"trace": "t1"}})
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				r := runs.begin(job)
				defer runs.end(job, r)
				return failure(job)
			})
			stop := e.start(t, h, worker.Config{Retry: &retry.Rules{Policy: retry.Constant(10 * time.Millisecond), MaxAttempts: 4}})
			e.logs.wait(t, "job discarded", 1, 30*time.Second)
			stop()
			if got := len(runs.get("doomed")); got != 4 {
				t.Fatalf("job ran %d times, want 4", got)
			}
			dead := e.dead(t)
			d, ok := dead["doomed"]
			if !ok || len(dead) != 1 {
				t.Fatalf("discard queue holds %v, want the one job", dead)
			}
			if d.Reason != "job doomed run 4 failed" {
				t.Errorf("reason %q, want the last error", d.Reason)
			}
			if d.msg.Attempt() != 4 || d.msg.Retries != 3 || d.msg.Kind != "doomed" || d.msg.Headers["trace"] != "t1" {
				t.Errorf("discarded message %+v, want kind doomed, Attempt() 4, Retries 3, its headers", d.msg)
			}
			if got := e.logs.ints("job failed; retrying", "attempt"); !slices.Equal(got, []int64{1, 2, 3}) {
				t.Errorf("retry log records name attempts %v, want 1, 2, 3", got)
			}
			last := e.logs.ints("job discarded", "attempt")
			limit := e.logs.ints("job discarded", "max_attempts")
			if len(last) != 1 || last[0] != int64(d.msg.Attempt()) || len(limit) != 1 || limit[0] != 4 {
				t.Errorf("discard log record names attempt %v of %v; the record says attempt %d of 4", last, limit, d.msg.Attempt())
			}
			if d.At.Before(began.Add(-time.Second)) || d.At.After(time.Now().Add(time.Second)) {
				t.Errorf("discarded at %v, want between %v and now", d.At, began)
			}
			e.assertOnlyKeys(t, "dead")
		})
	}
}

// TestRetryFreesTheSlot: with one worker slot, a job waiting for its retry
// sits in the queue's timer set, not in the slot: another job runs
// meanwhile. The retry middleware settles the job; the pool, whose own
// rules would discard it at once, leaves it alone.
func TestRetryFreesTheSlot(t *testing.T) {
	t.Parallel()
	const after = 1500 * time.Millisecond
	for i, drv := range drivers {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, i)
			ctx := context.Background()
			runs := newRunLog()
			mw, err := retry.Middleware(&retry.Rules{Policy: retry.Constant(after), MaxAttempts: 5})
			if err != nil {
				t.Fatal(err)
			}
			settled := make(chan struct{}, 1)
			// Outside the retry middleware: it sees the job settled when
			// the middleware returns.
			watch := func(next conveyor.Handler) conveyor.Handler {
				return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
					err := next.ProcessJob(ctx, job)
					if job.ID == "slow" && job.Retries == 0 && job.Settled() {
						settled <- struct{}{}
					}
					return err
				})
			}
			otherRan := make(chan struct{})
			secondRun := make(chan struct{})
			h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				r := runs.begin(job)
				defer runs.end(job, r)
				switch {
				case job.ID == "other":
					close(otherRan)
				case job.Retries == 0:
					return failure(job)
				default:
					close(secondRun)
				}
				return nil
			})
			e.enqueue(t, "k", "slow", nil)
			stop := e.start(t, h, worker.Config{
				Concurrency: 1,
				Middleware:  []conveyor.Middleware{watch, mw},
				Retry:       &retry.Rules{MaxAttempts: 1}, // the pool would discard
			})
			waitFor(t, "the first run to be settled", 10*time.Second, settled)
			score, err := e.rdb.ZScore(ctx, e.key("delayed"), "slow").Result()
			if err != nil {
				t.Fatalf("the retry is not in the timer set: %v", err)
			}
			if due := time.UnixMilli(int64(score)); due.Before(runs.get("slow")[0].end.Add(after)) {
				t.Fatalf("retry due at %v, before the failure + %v", due, after)
			}
			e.enqueue(t, "k", "other", nil)
			waitFor(t, "the other job", 10*time.Second, otherRan)
			select {
			case <-secondRun:
				t.Fatal("the retry ran before the job enqueued after it: it held the slot")
			default:
			}
			waitFor(t, "the retry", 10*time.Second, secondRun)
			stop()
			rs := runs.get("slow")
			if len(rs) != 2 || rs[1].start.Sub(rs[0].end) < after {
				t.Fatalf("runs %+v, want 2, the second at least %v after the first", rs, after)
			}
			for _, msg := range []string{"job discarded", "job failed; retrying", "settle failed"} {
				if c, _ := e.logs.count(msg); c != 0 {
					t.Errorf("pool logged %q %d times: it handled a job the middleware settled", msg, c)
				}
			}
			e.assertOnlyKeys(t)
		})
	}
}

func waitFor(t *testing.T, what string, d time.Duration, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}
