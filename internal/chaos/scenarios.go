package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// baseLoad is the work of every scenario unless it says otherwise: a few
// hundred jobs in a second and a half for the short form, two thousand in
// eight for the full one, on three worker processes.
func (h *harness) baseLoad() load {
	if h.short {
		return load{jobs: 240, produceFor: 1500 * time.Millisecond, workers: 3, concurrency: 4, lease: time.Second,
			maxMs: 20, manyShare: 0.1, delayShare: 0.1, maxDelay: 800 * time.Millisecond, failShare: 0.03,
			groupShare: 0.3, groups: 8, limit: 8, drainFor: 15 * time.Second}
	}
	return load{jobs: 2000, produceFor: 8 * time.Second, workers: 3, concurrency: 4, lease: 2 * time.Second,
		maxMs: 30, manyShare: 0.1, delayShare: 0.1, maxDelay: 2 * time.Second, failShare: 0.03,
		groupShare: 0.3, groups: 16, limit: 8, drainFor: 60 * time.Second}
}

// failed returns a verdict for a run that could not be carried out.
func failed(name, driver string, format string, args ...any) *verdict {
	v := &verdict{scenario: name, driver: driver, explained: map[string]int{}, recovery: -1}
	v.end.drained = true
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
	return v
}

// standard runs the common shape of a scenario: start the workers, produce
// while chaos disrupts (chaos returns when its disruptions are over), wait
// for the queue to drain, judge. The caller closes e.
func standard(ctx context.Context, e *env, ru rules, chaos func(ctx context.Context, produced <-chan struct{})) *verdict {
	e.phase("redis started")
	if err := e.startWorkers(ctx, e.load.workers); err != nil {
		return failed(e.name, e.driver, "start workers: %v", err)
	}
	produced := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		chaos(ctx, produced)
	}()
	if err := e.produce(ctx); err != nil {
		e.problem("produce: %v", err)
	}
	close(produced)
	e.phase("produced")
	wg.Wait()
	e.phase("chaos over")
	return e.verdict(ru, e.drain(ctx))
}

// every calls f every d until stop is closed and at least min calls were
// made (or ctx ends); it returns how many calls it made. The period is the
// disruptions' schedule, not a synchronisation.
func every(ctx context.Context, d time.Duration, min int, stop <-chan struct{}, f func(i int)) int {
	t := time.NewTicker(d)
	defer t.Stop()
	stopped := false
	for i := 0; ; {
		select {
		case <-t.C:
		case <-stop:
			stopped, stop = true, nil
			if i >= min {
				return i
			}
			continue
		case <-ctx.Done():
			return i
		}
		f(i)
		i++
		if stopped && i >= min {
			return i
		}
	}
}

// killWorkers SIGKILLs a worker process while it runs a job, round robin,
// and starts a new one in its place, every 1.3 leases while the producers
// run. 1.3 leases: the jobs a killed worker held come back between two
// kills, so that few are in flight in three killed workers in a row (and
// discarded as poison, as designed). The short form kills twice, 0.7
// leases apart: two kills cannot make poison.
func killWorkers(ctx context.Context, h *harness, driver string) *verdict {
	l := h.baseLoad()
	e, err := h.newEnv(ctx, "kill-workers", driver, l, nil)
	if err != nil {
		return failed("kill-workers", driver, "%v", err)
	}
	defer e.close()
	minKills, period := 2, l.lease*7/10
	if !h.short {
		minKills, period = 5, l.lease*13/10
	}
	kills := 0
	v := standard(ctx, e, rules{explains: map[string]bool{"kill": true}}, func(ctx context.Context, produced <-chan struct{}) {
		every(ctx, period, minKills, produced, func(i int) {
			ws := e.liveWorkers()
			if len(ws) == 0 {
				return
			}
			w := ws[0] // the oldest: round robin
			// Kill it while it runs a job: wait for one to start (bounded).
			deadline := time.After(2 * time.Second)
		wait:
			for {
				changed := e.rec.changed()
				if e.rec.runningIn(w.inc) > 0 {
					break
				}
				select {
				case <-changed:
				case <-deadline:
					break wait
				case <-ctx.Done():
					break wait
				}
			}
			e.replace(ctx, w)
			kills++
		})
	})
	v.facts = append(v.facts, fmt.Sprintf("kills=%d", kills))
	if kills < minKills {
		v.problems = append(v.problems, fmt.Sprintf("only %d kills", kills))
	}
	return v
}

// redisRestart SIGKILLs Redis (appendonly yes, appendfsync always) while
// producers and workers run, keeps it down a moment, and starts it again on
// the same port from its AOF.
func redisRestart(ctx context.Context, h *harness, driver string) *verdict {
	l := h.baseLoad()
	restarts, down := 1, 300*time.Millisecond
	if !h.short {
		restarts, down = 3, time.Second
	}
	e, err := h.newEnv(ctx, "redis-restart", driver, l, nil, "--appendonly", "yes", "--appendfsync", "always")
	if err != nil {
		return failed("redis-restart", driver, "%v", err)
	}
	defer e.close()
	done := 0
	v := standard(ctx, e, rules{explains: map[string]bool{"lease_lost": true, "unsettled": true}}, func(ctx context.Context, produced <-chan struct{}) {
		gap := l.produceFor / time.Duration(restarts+1)
		for i := 0; i < restarts; i++ {
			select {
			case <-time.After(gap): // the schedule of the outages
			case <-ctx.Done():
				return
			}
			e.redis.Kill()
			select {
			case <-time.After(down): // the outage itself
			case <-ctx.Done():
			}
			if err := e.redis.Restart(ctx); err != nil {
				e.problem("restart: %v", err)
				return
			}
			e.rec.addFault(fault{kind: "restart", end: time.Now()})
			done++
		}
	})
	v.facts = append(v.facts, fmt.Sprintf("restarts=%d down=%s", done, fmtDur(down)))
	if done < restarts {
		v.problems = append(v.problems, fmt.Sprintf("only %d of %d restarts", done, restarts))
	}
	return v
}

// proxyCutPause puts a proxy between every client and Redis that cuts all
// connections and pauses all traffic in turns: a short pause, and one
// longer than the lease (a partition: leases run out while workers run).
func proxyCutPause(ctx context.Context, h *harness, driver string) *verdict {
	l := h.baseLoad()
	e, err := h.newEnv(ctx, "proxy", driver, l, nil)
	if err != nil {
		return failed("proxy", driver, "%v", err)
	}
	defer e.close()
	p, err := e.newProxy()
	if err != nil {
		return failed("proxy", driver, "%v", err)
	}
	e.prodTo, e.workTo = p.Addr(), p.Addr()
	cuts, pauses := 0, 0
	minSteps := 4
	v := standard(ctx, e, rules{explains: map[string]bool{"lease_lost": true, "unsettled": true}}, func(ctx context.Context, produced <-chan struct{}) {
		e.waitWorking(ctx)
		every(ctx, l.produceFor/5, minSteps, produced, func(i int) {
			switch i % 4 {
			case 0, 2:
				p.Cut()
				cuts++
			case 1, 3:
				hold := 300 * time.Millisecond
				if i%4 == 3 {
					hold = l.lease + 500*time.Millisecond
				}
				p.Pause()
				select {
				case <-time.After(hold): // the partition itself
				case <-ctx.Done():
				}
				p.Resume()
				pauses++
			}
			e.rec.addFault(fault{kind: "proxy", end: time.Now()})
		})
	})
	v.facts = append(v.facts, fmt.Sprintf("cuts=%d conns_cut=%d pauses=%d", cuts, p.Cuts(), pauses))
	return v
}

// lostReply puts a proxy between producers and Redis and another between
// workers and Redis that, while the producers run, lose about one reply in
// 6 (producers) and one in 25 (workers): the command ran in Redis, the
// client's connection closes before the reply reaches it (go-redis then
// re-sends it, by default).
func lostReply(ctx context.Context, h *harness, driver string) *verdict {
	l := h.baseLoad()
	e, err := h.newEnv(ctx, "lost-reply", driver, l, nil)
	if err != nil {
		return failed("lost-reply", driver, "%v", err)
	}
	defer e.close()
	pp, err := e.newProxy()
	if err != nil {
		return failed("lost-reply", driver, "%v", err)
	}
	wp, err := e.newProxy()
	if err != nil {
		return failed("lost-reply", driver, "%v", err)
	}
	e.prodTo, e.workTo = pp.Addr(), wp.Addr()
	v := standard(ctx, e, rules{explains: map[string]bool{"lease_lost": true, "unsettled": true}}, func(ctx context.Context, produced <-chan struct{}) {
		// Producers send fewer, larger round trips (group commit): lose
		// more of theirs, so that enough enqueues lose their reply.
		pp.LoseReplies(6)
		e.waitWorking(ctx)
		wp.LoseReplies(25)
		select {
		case <-produced:
		case <-ctx.Done():
		}
		pp.LoseReplies(0)
		wp.LoseReplies(0)
		e.rec.addFault(fault{kind: "lost-reply", end: time.Now()})
	})
	v.facts = append(v.facts, fmt.Sprintf("lost_replies=%d+%d", pp.Lost(), wp.Lost()))
	if pp.Lost() == 0 || wp.Lost() == 0 {
		v.problems = append(v.problems, "no reply lost on one path")
	}
	return v
}

// clockSkew runs Redis with its wall clock moved by off (the LD_PRELOAD
// shim) against workers and producers on the true clock, with jobs that
// outlive their lease (heartbeats must extend them) and delayed jobs (they
// must never run early, nor late by the skew).
func clockSkew(off time.Duration) func(ctx context.Context, h *harness, driver string) *verdict {
	return func(ctx context.Context, h *harness, driver string) *verdict {
		name := fmt.Sprintf("clock-skew%+ds", int(off.Seconds()))
		if h.skewLib == "" {
			return failed(name, driver, "no clock shim: run scripts/chaos.sh, or pass -skew-lib")
		}
		l := h.baseLoad()
		l.longJobs, l.delayShare = 3, 0.2
		if !h.short {
			l.longJobs = 6
		}
		// No concurrency limit: the long jobs would hold most of its slots
		// for 2.5 leases, and delayed jobs would start late behind the
		// backlog, which is not what the lateness bound is about (time
		// decisions under skew).
		l.limit = 0
		lateBound := 2 * time.Second
		// A job late by more than lateBound fails the run: wait no longer
		// than it takes to see that.
		l.drainFor = l.maxDelay + lateBound + 3*l.lease + 2*time.Second
		e, err := h.newEnv(ctx, name, driver, l, redisproc.SkewEnv(h.skewLib, off))
		if err != nil {
			return failed(name, driver, "%v", err)
		}
		defer e.close()
		t, err := e.admin.Time(ctx).Result()
		if err != nil {
			return failed(name, driver, "TIME: %v", err)
		}
		skew := time.Until(t)
		if d := skew - off; d > time.Second || d < -time.Second {
			return failed(name, driver, "the shim did not skew Redis: TIME is %v from the local clock, want %v", skew.Round(time.Millisecond), off)
		}
		v := standard(ctx, e, rules{lateBound: lateBound}, func(context.Context, <-chan struct{}) {})
		v.facts = append(v.facts, fmt.Sprintf("skew=%+.1fs long_jobs=%d", skew.Seconds(), l.longJobs))
		return v
	}
}

// fullRedis fills Redis (maxmemory, noeviction) with jobs while no worker
// runs, until producers are refused; then starts the workers, which must
// drain the queue while producers go on being refused at times.
func fullRedis(ctx context.Context, h *harness, driver string) *verdict {
	l := h.baseLoad()
	l.pad, l.manyShare, l.delayShare = 1000, 0.3, 0.05
	budget := int64(2 << 20)
	if !h.short {
		budget = 6 << 20
	}
	e, err := h.newEnv(ctx, "full-redis", driver, l, nil, "--maxmemory-policy", "noeviction")
	if err != nil {
		return failed("full-redis", driver, "%v", err)
	}
	defer e.close()
	info, err := e.admin.Info(ctx, "memory").Result()
	if err != nil {
		return failed("full-redis", driver, "INFO: %v", err)
	}
	used := infoInt(info, "used_memory")
	if err := e.admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+budget, 10)).Err(); err != nil {
		return failed("full-redis", driver, "CONFIG SET maxmemory: %v", err)
	}

	// Fill: as fast as two producers go, until 20 calls were refused for
	// memory (or a bound, should Redis never fill).
	c, rdb, err := e.producerClient()
	if err != nil {
		return failed("full-redis", driver, "%v", err)
	}
	defer rdb.Close()
	var mu sync.Mutex
	oom := 0
	var wg sync.WaitGroup
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rng := newRand(p)
			for i := 0; i < 200_000 && ctx.Err() == nil; i++ {
				err := e.call(ctx, c, rng, 0)
				if err != nil && strings.Contains(err.Error(), "OOM") {
					mu.Lock()
					oom++
					n := oom
					mu.Unlock()
					if n >= 20 {
						return
					}
				}
			}
		}(p)
	}
	wg.Wait()
	filled := int(e.seq.Load())
	// Drain: workers start on the full Redis; producers go on at the load's
	// pace and are refused while it stays full.
	if err := e.startWorkers(ctx, l.workers); err != nil {
		return failed("full-redis", driver, "workers on a full Redis: %v", err)
	}
	l.jobs = filled + l.jobs
	e.load = l
	if err := e.produce(ctx); err != nil {
		e.problem("produce: %v", err)
	}
	v := e.verdict(rules{}, e.drain(ctx))
	refused := 0
	e.rec.mu.Lock()
	for _, c := range e.rec.calls {
		if c.err != nil && strings.Contains(c.err.Error(), "OOM") {
			refused++
		}
	}
	e.rec.mu.Unlock()
	v.facts = append(v.facts, fmt.Sprintf("filled_at=%d oom_refusals=%d maxmemory=+%dMiB", filled, refused, budget>>20))
	if oom == 0 {
		v.problems = append(v.problems, "Redis never refused a producer: not full")
	}
	return v
}

func infoInt(info, field string) int64 {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
