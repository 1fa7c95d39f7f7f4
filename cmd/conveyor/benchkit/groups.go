package benchkit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// groupedTarget is a target that can put jobs in FIFO groups (Conveyor's).
type groupedTarget interface {
	Target
	EnqueueGrouped(ctx context.Context, payloads [][]byte, groups []string) error
}

// e2eGroups drains -n jobs without groups, then -n jobs in -groups FIFO
// groups, each from a fresh namespace with a pool of -concurrency, and
// reports both rates and their ratio.
func e2eGroups(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	plain, err := drainGroups(ctx, e, f, label+" without groups", 0)
	if err != nil {
		return nil, err
	}
	grouped, err := drainGroups(ctx, e, f, fmt.Sprintf("%s, %d groups", label, e.Cfg.Groups), e.Cfg.Groups)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%d groups", e.Cfg.Groups)
	return []Metric{
		{Name: "processed, without groups", Value: plain, Unit: "jobs/s"},
		{Name: "processed, " + name, Value: grouped, Unit: "jobs/s"},
		{Name: name + " vs without", Value: grouped / plain, Unit: "ratio"},
	}, nil
}

// drainGroups preloads -n jobs (in groups FIFO groups, job i in group
// i mod groups; 0: no groups), drains them with a pool of -concurrency
// and returns the rate from the pool's start to the start of the last job.
func drainGroups(ctx context.Context, e *Env, f Factory, label string, groups int) (_ float64, err error) {
	t, closeT, err := open(e, e.Redis, f, fmt.Sprintf("e2e-groups%d", groups))
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	if groups == 0 {
		if err := preload(ctx, e, t, e.Cfg.N, label); err != nil {
			return 0, err
		}
	} else {
		gt, ok := t.(groupedTarget)
		if !ok {
			return 0, fmt.Errorf("benchkit: %s has no FIFO groups", f.Name)
		}
		if err := preloadGrouped(ctx, e, gt, groups, label); err != nil {
			return 0, err
		}
	}
	return drain(ctx, e, t, label)
}

// preloadGrouped enqueues -n jobs in groups FIFO groups, 1,000 per call.
func preloadGrouped(ctx context.Context, e *Env, t groupedTarget, groups int, label string) error {
	var done atomic.Int64
	stop := e.progress(label+" (preload)", e.Cfg.N, &done)
	defer stop()
	p := e.payload(1)
	names := make([]string, groups)
	for g := range names {
		names[g] = "g" + strconv.Itoa(g)
	}
	const size = 1000
	batch := make([][]byte, 0, size)
	gs := make([]string, 0, size)
	for i := 0; i < e.Cfg.N; i += size {
		batch, gs = batch[:0], gs[:0]
		for j := i; j < min(i+size, e.Cfg.N); j++ {
			batch = append(batch, p)
			gs = append(gs, names[j%groups])
		}
		if err := t.EnqueueGrouped(ctx, batch, gs); err != nil {
			return fmt.Errorf("benchkit: preload: %w", err)
		}
		done.Add(int64(len(batch)))
	}
	return nil
}
