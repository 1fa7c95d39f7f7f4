package worker

import (
	"context"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// registryTTLs is how many RegistryIntervals a pool's entry outlives its
// last renewal.
const registryTTLs = 3

// startRegistry registers the pool in the fleet's registry of workers when
// the driver keeps one, and renews its entry every RegistryInterval until
// ctx ends; then it removes the entry and closes the channel it returned.
// Registry errors are logged (at Warn, once per run of failures) and never
// stop the pool: the registry serves operators, not the jobs.
func (p *Pool) startRegistry(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	reg, ok := p.d.(broker.WorkerRegistry)
	if !ok || p.cfg.RegistryInterval < 0 {
		close(done)
		return done
	}
	info := &broker.WorkerInfo{
		ID: p.id, Host: p.host, PID: os.Getpid(), Queues: p.cfg.queueNames(),
		Concurrency: p.cfg.Concurrency, StartedAt: time.Now(), Version: moduleVersion(),
	}
	ttl := registryTTLs * p.cfg.RegistryInterval
	go func() {
		defer close(done)
		tick := time.NewTicker(p.cfg.RegistryInterval)
		defer tick.Stop()
		failing := false
		for {
			info.Running, info.RunningTotal = p.runningJobs()
			info.SeenAt = time.Now()
			rctx, cancel := context.WithTimeout(ctx, p.cfg.RegistryInterval)
			err := reg.RegisterWorker(rctx, info, ttl)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				p.log.Warn("worker registry: renewing the pool's entry failed; trying again each interval", "error", err)
				failing = true
			case err == nil && failing:
				p.log.Info("worker registry: the pool's entry is renewed again")
				failing = false
			}
			select {
			case <-ctx.Done():
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if err := reg.UnregisterWorker(uctx, info.ID); err != nil {
					p.log.Warn("worker registry: removing the pool's entry failed; it goes when its TTL runs out", "error", err, "ttl", ttl)
				}
				cancel()
				return
			case <-tick.C:
			}
		}
	}()
	return done
}

// runningJobs lists the jobs whose handlers run, oldest first, at most
// broker.MaxRegisteredJobs, and how many run.
func (p *Pool) runningJobs() ([]broker.RunningJob, int) {
	tasks := p.held()
	out := make([]broker.RunningJob, 0, len(tasks))
	for _, t := range tasks {
		t.mu.Lock()
		started := t.started
		t.mu.Unlock()
		if !started.IsZero() {
			out = append(out, broker.RunningJob{ID: t.d.ID, Kind: t.d.Kind, Queue: t.d.Queue, StartedAt: started})
		}
	}
	slices.SortFunc(out, func(a, b broker.RunningJob) int { return a.StartedAt.Compare(b.StartedAt) })
	n := len(out)
	if n > broker.MaxRegisteredJobs {
		out = out[:broker.MaxRegisteredJobs]
	}
	return out, n
}

// moduleVersion is the version of the Conveyor module in the running
// binary's build information, "(devel)" when it was built from Conveyor's
// own tree or "unknown" without build information.
var moduleVersion = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	const mod = "github.com/conveyorq/conveyor"
	if bi.Main.Path == mod {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == mod {
			return d.Version
		}
	}
	return "unknown"
})
