package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Workload is one measurement.
type Workload struct {
	Name string
	// Doc says what it measures, for `conveyor help bench`.
	Doc string
	run func(ctx context.Context, e *Env, f Factory, label string) ([]Metric, error)
}

// Workloads lists the workloads of one Redis server, in the order "all"
// runs them on one.
func Workloads() []Workload {
	return []Workload{
		{"enqueue-loop", "Enqueue from one goroutine, alternated with a bare go-redis LPUSH loop (the baseline) in rounds of 2,000", enqueueLoop},
		{"enqueue-parallel", "Enqueue from -concurrency goroutines at once", enqueueParallel},
		{"enqueue-batch", "EnqueueMany in batches of -batch from one goroutine", enqueueBatch},
		{"e2e", "-n jobs enqueued first, then drained by a pool of -concurrency (handler start of the last job)", e2e},
		{"e2e-split", "-n jobs enqueued first, drained by one pool of -split×10 workers, then (-n more each time) by -split pools of 10, each with its own client, with the default waiting room and with Prefetch 32; the ratios", e2eSplit},
		{"e2e-groups", "-n jobs in -groups FIFO groups (job i in group i mod -groups) enqueued first, then drained by a pool of -concurrency, against -n jobs without groups in the same run; the ratio", e2eGroups},
		{"e2e-mixed", "a pool of -concurrency running while -concurrency goroutines Enqueue -n jobs", e2eMixed},
		{"latency", "-rate jobs/s for -duration into a running pool; enqueue to handler start", latency},
		{"delay", "-timers timers due over -window from 1s ahead, run by a pool; handler start minus due time", delayLateness},
		{"memory", "INFO used_memory delta over -n pending jobs, per job", memory},
		{"idle", "commands per second an idle pool sends (a counting client hook, over -idle)", idle},
		{"fleet", "-pools pools of concurrency 1 on one queue, each with its own client, against 1 pool: the server's commands/s while idle (over -idle, at least the 15s of a worker registry interval), its commands and CPU per job at one job per 20ms for -duration, plain and delayed 300ms, and lateness (INFO commandstats and cpu: use a Redis nothing else uses)", fleet},
	}
}

// ClusterWorkloads lists the workloads that need a Redis Cluster (see
// ClusterURL); all runs them, and only them, on one.
func ClusterWorkloads() []Workload {
	return []Workload{
		{"sharded", "-n jobs enqueued (batches of 1,000) then drained by a pool of -concurrency, on a queue whole and split into -partitions (broker/shard); the rates, their ratio, the masters' commands and CPU per job, and each master's share of the masters' INFO commandstats usec (scripts' and transactions' own lines left out: their commands have lines of their own) and CPU seconds over the split run, and the largest deviation from 1/masters as a fraction of it (use a cluster nothing else uses)", sharded},
	}
}

// Lookup returns the named workload, of either list.
func Lookup(name string) (Workload, bool) {
	for _, w := range append(Workloads(), ClusterWorkloads()...) {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// Run runs the named workload on the system f makes, in a namespace of its
// own that it deletes afterwards.
func Run(ctx context.Context, e *Env, workload string, f Factory) (Result, error) {
	w, ok := Lookup(workload)
	if !ok {
		return Result{}, fmt.Errorf("benchkit: unknown workload %q", workload)
	}
	ms, err := w.run(ctx, e, f, workload+" "+f.Name)
	if err != nil {
		return Result{}, fmt.Errorf("%s on %s: %w", workload, f.Name, err)
	}
	return Result{Workload: workload, System: f.Name, Metrics: goals(workload, f.Name, e.Cfg, ms)}, nil
}

// open makes a target in a fresh namespace; close deletes its keys even
// when ctx is cancelled.
func open(e *Env, rdb redis.UniversalClient, f Factory, workload string) (Target, func() error, error) {
	t, err := f.New(rdb, e.Namespace(workload, f.Name))
	if err != nil {
		return nil, nil, err
	}
	return t, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return t.Close(ctx)
	}, nil
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func enqueueLoop(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "enqueue-loop")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	bare := e.Prefix + ":baseline-lpush"
	defer e.Redis.Del(context.WithoutCancel(ctx), bare)
	p := e.payload(1)
	var done atomic.Int64
	stop := e.progress(label, e.Cfg.N, &done)
	defer stop()
	lpush := func(k int) (time.Duration, error) {
		t0 := time.Now()
		for range k {
			if err := e.Redis.LPush(ctx, bare, p).Err(); err != nil {
				return 0, fmt.Errorf("baseline LPUSH: %w", err)
			}
		}
		took := time.Since(t0)
		return took, e.Redis.Del(ctx, bare).Err()
	}
	enqueue := func(k int) (time.Duration, error) {
		t0 := time.Now()
		for range k {
			if err := t.Enqueue(ctx, p); err != nil {
				return 0, err
			}
		}
		return time.Since(t0), nil
	}
	// An untimed warm-up of both sides: connections dialled, scripts
	// loaded, the queue's keys created.
	if _, err := lpush(100); err != nil {
		return nil, err
	}
	if _, err := enqueue(100); err != nil {
		return nil, err
	}
	const round = 2000
	var tBare, tSys time.Duration
	for r := 0; done.Load() < int64(e.Cfg.N); r++ {
		k := min(round, e.Cfg.N-int(done.Load()))
		// Each side goes first in every other round, so that neither
		// gains from following the other.
		sides := []func(int) (time.Duration, error){lpush, enqueue}
		sums := []*time.Duration{&tBare, &tSys}
		if r%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
			sums[0], sums[1] = sums[1], sums[0]
		}
		for i, side := range sides {
			took, err := side(k)
			if err != nil {
				return nil, err
			}
			*sums[i] += took
		}
		done.Add(int64(k))
	}
	sys, base := rate(e.Cfg.N, tSys), rate(e.Cfg.N, tBare)
	return []Metric{
		{Name: "enqueued", Value: sys, Unit: "jobs/s"},
		{Name: "baseline LPUSH", Value: base, Unit: "ops/s"},
		{Name: "vs LPUSH", Value: sys / base, Unit: "ratio"},
	}, nil
}

func enqueueParallel(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "enqueue-parallel")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	p := e.payload(1)
	var done atomic.Int64
	stop := e.progress(label, e.Cfg.N, &done)
	defer stop()
	t0 := time.Now()
	if err := enqueueFromMany(ctx, e, t, p, &done); err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	return []Metric{{Name: "enqueued", Value: rate(e.Cfg.N, elapsed), Unit: "jobs/s"}}, nil
}

func enqueueBatch(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "enqueue-batch")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	p := e.payload(1)
	var done atomic.Int64
	stop := e.progress(label, e.Cfg.N, &done)
	defer stop()
	t0 := time.Now()
	if err := enqueueInBatches(ctx, t, p, e.Cfg.N, e.Cfg.Batch, &done); err != nil {
		return nil, err
	}
	return []Metric{{Name: "enqueued", Value: rate(e.Cfg.N, time.Since(t0)), Unit: "jobs/s"}}, nil
}

func e2e(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "e2e")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	if err := preload(ctx, e, t, e.Cfg.N, label); err != nil {
		return nil, err
	}
	r, err := drain(ctx, e, t, label)
	if err != nil {
		return nil, err
	}
	return []Metric{{Name: "processed", Value: r, Unit: "jobs/s"}}, nil
}

// drain runs a pool of -concurrency on the -n jobs t holds and returns the
// rate from its start to the start of the last job.
func drain(ctx context.Context, e *Env, t Target, label string) (_ float64, err error) {
	var handled tally
	all := handled.reached(int64(e.Cfg.N))
	stop := e.progress(label, e.Cfg.N, &handled.n)
	defer stop()
	t0 := time.Now()
	s := serve(ctx, t, e.Cfg.Concurrency, func([]byte) { handled.add() })
	defer func() { err = errors.Join(err, s.stop()) }()
	if err := s.wait(ctx, all, e.Cfg.Timeout, "every job to run"); err != nil {
		return 0, err
	}
	return rate(e.Cfg.N, time.Since(t0)), nil
}

func e2eMixed(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "e2e-mixed")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	var handled tally
	s := serve(ctx, t, e.Cfg.Concurrency, func([]byte) { handled.add() })
	defer func() { err = errors.Join(err, s.stop()) }()
	if err := warmUp(ctx, e, t, s, &handled); err != nil {
		return nil, err
	}
	all := handled.reached(int64(e.Cfg.N) + 1)
	p := e.payload(1)
	var enq atomic.Int64
	stop := e.progress(label, e.Cfg.N, &handled.n)
	defer stop()
	t0 := time.Now()
	if err := enqueueFromMany(ctx, e, t, p, &enq); err != nil {
		return nil, err
	}
	tEnq := time.Since(t0)
	if err := s.wait(ctx, all, e.Cfg.Timeout, "every job to run"); err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	return []Metric{
		{Name: "processed", Value: rate(e.Cfg.N, elapsed), Unit: "jobs/s"},
		{Name: "enqueued", Value: rate(e.Cfg.N, tEnq), Unit: "jobs/s"},
	}, nil
}

// samples collects durations from many goroutines.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// stamped is a target being served by a handler that records, for every
// job, the time since the stamp in its payload.
type stamped struct {
	s       *serving
	lat     samples
	handled tally
	all     <-chan struct{} // closed once n jobs ran after the warm-up
}

// serveStamped serves t with such a handler and warms it up; the caller
// stops r.s.
func serveStamped(ctx context.Context, e *Env, t Target, n int) (*stamped, error) {
	r := &stamped{lat: samples{d: make([]time.Duration, 0, n)}}
	r.s = serve(ctx, t, e.Cfg.Concurrency, func(p []byte) {
		now := time.Now()
		if st := getStamp(p); st != 0 {
			r.lat.add(e.sinceStamp(now, st))
		}
		r.handled.add()
	})
	if err := warmUp(ctx, e, t, r.s, &r.handled); err != nil {
		return nil, errors.Join(err, r.s.stop())
	}
	r.all = r.handled.reached(int64(n) + 1)
	return r, nil
}

// summary summarises the delays recorded so far.
func (r *stamped) summary() Distribution {
	r.lat.mu.Lock()
	defer r.lat.mu.Unlock()
	return Summarise(r.lat.d)
}

func latency(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "latency")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	n := max(1, int(float64(e.Cfg.Rate)*e.Cfg.Duration.Seconds()))
	r, err := serveStamped(ctx, e, t, n)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, r.s.stop()) }()
	stop := e.progress(label, n, &r.handled.n)
	defer stop()
	// Jobs go out on a fixed schedule (job i at t0 + i/rate); a late send
	// does not shift the ones after it, so the offered rate holds.
	interval := time.Second / time.Duration(e.Cfg.Rate)
	t0 := time.Now()
	for i := range n {
		if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		now := time.Now()
		if err := t.Enqueue(ctx, e.payload(e.stamp(now))); err != nil {
			return nil, err
		}
	}
	sent := rate(n, time.Since(t0))
	if err := r.s.wait(ctx, r.all, e.Cfg.Timeout, "every job to run"); err != nil {
		return nil, err
	}
	d := r.summary()
	return []Metric{
		{Name: "offered", Value: sent, Unit: "jobs/s"},
		{Name: "p50", Value: ms(d.P50), Unit: "ms"},
		{Name: "p90", Value: ms(d.P90), Unit: "ms"},
		{Name: "p99", Value: ms(d.P99), Unit: "ms"},
		{Name: "max", Value: ms(d.Max), Unit: "ms"},
	}, nil
}

// delayLead is how far ahead the first timer is due: the whole batch must
// be stored before then.
const delayLead = time.Second

func delayLateness(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "delay")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	n := e.Cfg.Timers
	r, err := serveStamped(ctx, e, t, n)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, r.s.stop()) }()
	start := time.Now()
	payloads := make([][]byte, n)
	at := make([]time.Time, n)
	for i := range n {
		var off time.Duration
		if e.Cfg.Window > 0 {
			off = rand.N(e.Cfg.Window)
		}
		at[i] = start.Add(delayLead + off)
		payloads[i] = e.payload(e.stamp(at[i]))
	}
	for i := 0; i < n; i += 1000 {
		j := min(i+1000, n)
		if err := t.EnqueueAt(ctx, payloads[i:j], at[i:j]); err != nil {
			return nil, err
		}
	}
	if took := time.Since(start); took >= delayLead {
		return nil, fmt.Errorf("storing %d timers took %s, past the first due time; use fewer -timers", n, took)
	}
	stop := e.progress(label, n, &r.handled.n)
	defer stop()
	if err := r.s.wait(ctx, r.all, delayLead+e.Cfg.Window+e.Cfg.Timeout, "every timer to run"); err != nil {
		return nil, err
	}
	d := r.summary()
	return []Metric{
		{Name: "lateness p50", Value: ms(d.P50), Unit: "ms"},
		{Name: "lateness p99", Value: ms(d.P99), Unit: "ms"},
		{Name: "lateness max", Value: ms(d.Max), Unit: "ms"},
		{Name: "lateness min", Value: ms(d.Min), Unit: "ms"},
		{Name: "early", Value: float64(d.Negative), Unit: "timers"},
	}, nil
}

func memory(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	t, closeT, err := open(e, e.Redis, f, "memory")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	// One job first, so that the queue's own keys (registry, stream
	// group) are not counted against the jobs.
	if err := t.Enqueue(ctx, e.payload(1)); err != nil {
		return nil, err
	}
	before, err := UsedMemory(ctx, e.Redis)
	if err != nil {
		return nil, err
	}
	if err := preload(ctx, e, t, e.Cfg.N, label); err != nil {
		return nil, err
	}
	after, err := UsedMemory(ctx, e.Redis)
	if err != nil {
		return nil, err
	}
	return []Metric{{Name: "per pending job", Value: float64(after-before) / float64(e.Cfg.N), Unit: "bytes"}}, nil
}

// idleSettle is how long the idle workload lets a pool settle after its
// warm-up job before counting.
const idleSettle = time.Second

func idle(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	var count commandCounter
	rdb := redis.NewUniversalClient(e.Options)
	defer func() { err = errors.Join(err, rdb.Close()) }()
	rdb.AddHook(&count)
	t, closeT, err := open(e, rdb, f, "idle")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	var handled tally
	s := serve(ctx, t, e.Cfg.Concurrency, func([]byte) { handled.add() })
	defer func() { err = errors.Join(err, s.stop()) }()
	if err := warmUp(ctx, e, t, s, &handled); err != nil {
		return nil, err
	}
	var never atomic.Int64
	stop := e.progress(label+" (counting commands)", 0, &never)
	defer stop()
	if err := s.sleep(ctx, idleSettle); err != nil {
		return nil, err
	}
	c0, t0 := count.n.Load(), time.Now()
	if err := s.sleep(ctx, e.Cfg.Idle); err != nil {
		return nil, err
	}
	c1, elapsed := count.n.Load(), time.Since(t0)
	return []Metric{{Name: "idle commands", Value: float64(c1-c0) / elapsed.Seconds(), Unit: "cmd/s"}}, nil
}

// goals attaches the targets Conveyor's figures are held to (docs/performance.md).
func goals(workload, system string, cfg Config, ms []Metric) []Metric {
	if system != "list" && system != "stream" {
		return ms
	}
	for i, m := range ms {
		switch {
		case workload == "e2e" && m.Name == "processed" && cfg.N >= 100_000 && cfg.Concurrency == 50:
			ms[i] = m.withGoal(">=", map[string]float64{"list": 150_000, "stream": 100_000}[system])
		case workload == "e2e-split" && strings.HasPrefix(m.Name, "split vs one"):
			ms[i] = m.withGoal(">=", 0.9)
		case workload == "e2e-mixed" && m.Name == "processed":
			ms[i] = m.withGoal(">=", 100_000)
		case workload == "enqueue-loop" && m.Name == "vs LPUSH":
			ms[i] = m.withGoal(">=", 0.9)
		case workload == "enqueue-parallel" && m.Name == "enqueued" && cfg.Concurrency == 50:
			ms[i] = m.withGoal(">=", 200_000)
		case workload == "enqueue-batch" && m.Name == "enqueued" && cfg.Batch == 100:
			ms[i] = m.withGoal(">=", 500_000)
		case workload == "latency" && cfg.Rate == 2000 && m.Name == "p50":
			ms[i] = m.withGoal("<=", 1)
		case workload == "latency" && cfg.Rate == 2000 && m.Name == "p99":
			ms[i] = m.withGoal("<=", 3)
		case workload == "delay" && m.Name == "lateness p50":
			ms[i] = m.withGoal("<=", 2)
		case workload == "delay" && m.Name == "lateness p99":
			ms[i] = m.withGoal("<=", 10)
		case workload == "delay" && m.Name == "early":
			ms[i] = m.withGoal("<=", 0)
		case workload == "memory":
			ms[i] = m.withGoal("<=", 160)
		case workload == "idle":
			ms[i] = m.withGoal("<=", 5)
		case workload == "fleet":
			ms[i] = fleetGoal(cfg, m)
		case workload == "sharded":
			ms[i] = shardedGoal(m)
		}
	}
	return ms
}

// enqueueFromMany enqueues e.Cfg.N jobs of payload p on t from
// e.Cfg.Concurrency goroutines at once, counting each stored job in done;
// the first error stops them all.
func enqueueFromMany(ctx context.Context, e *Env, t Target, p []byte, done *atomic.Int64) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range e.Cfg.Concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(e.Cfg.N) {
				if err := t.Enqueue(ctx, p); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return firstErr
}
