package benchkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// splitWorkers is the concurrency of each pool of the e2e-split workload;
// splitPrefetch the larger waiting room its third drain gives each.
const (
	splitWorkers  = 10
	splitPrefetch = 32
)

// prefetcher is a Target whose pool's waiting room can be set.
type prefetcher interface {
	ServePrefetch(ctx context.Context, concurrency, prefetch int, h func([]byte)) error
}

// e2eSplit drains -n pre-enqueued jobs with one pool of Split×10 workers,
// then -n more with Split pools of 10 workers, each with a Redis client of
// its own (as separate processes would have), then -n more with the same
// pools given a waiting room of 32 (worker.Config.Prefetch), and reports
// the rates and their ratios: what splitting a pool's workers over a fleet
// costs, and what a larger room wins back.
func e2eSplit(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	total := e.Cfg.Split * splitWorkers
	one, err := drainWith(ctx, e, f, label+" 1 pool", 1, total, 0)
	if err != nil {
		return nil, err
	}
	many, err := drainWith(ctx, e, f, fmt.Sprintf("%s %d pools", label, e.Cfg.Split), e.Cfg.Split, splitWorkers, 0)
	if err != nil {
		return nil, err
	}
	roomy, err := drainWith(ctx, e, f, fmt.Sprintf("%s %d pools, prefetch %d", label, e.Cfg.Split, splitPrefetch), e.Cfg.Split, splitWorkers, splitPrefetch)
	if err != nil {
		return nil, err
	}
	a := fmt.Sprintf("1 pool of %d", total)
	b := fmt.Sprintf("%d pools of %d", e.Cfg.Split, splitWorkers)
	c := fmt.Sprintf("%s, prefetch %d", b, splitPrefetch)
	var out []Metric
	for _, d := range []struct {
		name string
		r    drained
	}{{a, one}, {b, many}, {c, roomy}} {
		out = append(out,
			Metric{Name: "processed, " + d.name, Value: d.r.rate, Unit: "jobs/s"},
			Metric{Name: "commands per job, " + d.name, Value: d.r.cmds, Unit: "cmd"},
			Metric{Name: "Redis CPU per job, " + d.name, Value: d.r.cpu, Unit: "µs"})
	}
	return append(out,
		Metric{Name: fmt.Sprintf("split vs one (%d pools)", e.Cfg.Split), Value: many.rate / one.rate, Unit: "ratio"},
		Metric{Name: fmt.Sprintf("split vs one (%d pools, prefetch %d)", e.Cfg.Split, splitPrefetch), Value: roomy.rate / one.rate, Unit: "ratio"},
	), nil
}

// drained is what one drain measured: its rate, and the server's commands
// (INFO commandstats, script-internal ones included) and CPU per job; the
// server's figures are whole-server ones, so use a Redis nothing else uses.
type drained struct{ rate, cmds, cpu float64 }

// drainWith enqueues -n jobs, then runs pools pools of concurrency conc
// (and waiting room prefetch, 0 for the default, on a target that can set
// it) on them, a pool beyond the first with its own client, and returns
// the rate from their start to the start of the last job.
func drainWith(ctx context.Context, e *Env, f Factory, label string, pools, conc, prefetch int) (_ drained, err error) {
	ns := e.Namespace(fmt.Sprintf("split%d", pools), f.Name)
	t, err := f.New(e.Redis, ns)
	if err != nil {
		return drained{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = errors.Join(err, t.Close(cctx))
	}()
	if err := preload(ctx, e, t, e.Cfg.N, label); err != nil {
		return drained{}, err
	}
	var handled tally
	all := handled.reached(int64(e.Cfg.N))
	stop := e.progress(label, e.Cfg.N, &handled.n)
	defer stop()
	h := func([]byte) { handled.add() }

	var (
		running []*serving
		clients []redis.UniversalClient
	)
	defer func() {
		for _, s := range running {
			err = errors.Join(err, s.stop())
		}
		for _, c := range clients {
			err = errors.Join(err, c.Close())
		}
	}()
	targets := []Target{t}
	for range pools - 1 {
		c := redis.NewUniversalClient(e.Options)
		clients = append(clients, c)
		pt, err := f.New(c, ns)
		if err != nil {
			return drained{}, err
		}
		targets = append(targets, pt)
	}
	c0, cpu0, err := serverCounts(ctx, e.Redis)
	if err != nil {
		return drained{}, err
	}
	t0 := time.Now()
	for _, pt := range targets {
		if pf, ok := pt.(prefetcher); ok && prefetch > 0 {
			running = append(running, serveWith(ctx, func(ctx context.Context) error { return pf.ServePrefetch(ctx, conc, prefetch, h) }))
			continue
		}
		running = append(running, serve(ctx, pt, conc, h))
	}
	if err := running[0].wait(ctx, all, e.Cfg.Timeout, "every job to run"); err != nil {
		return drained{}, err
	}
	elapsed := time.Since(t0)
	c1, cpu1, err := serverCounts(ctx, e.Redis)
	if err != nil {
		return drained{}, err
	}
	n := float64(e.Cfg.N)
	return drained{rate: rate(e.Cfg.N, elapsed), cmds: float64(c1-c0) / n, cpu: (cpu1 - cpu0) * 1e6 / n}, nil
}
