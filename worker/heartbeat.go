package worker

import (
	"context"
	"errors"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// heartbeat, every HeartbeatInterval until stop is closed, runs the
// watchdog over the running jobs (see watch) and, on a driver with leases,
// extends their leases in batches. A job whose lease could not be kept (the
// driver says it is lost, or its deadline passed while Redis was out of
// reach) has its context cancelled with cause ErrLeaseLost: another worker
// may already run it, so this one should stop. A job the driver reports
// cancelled (its extension still landed) is cancelled as the cancel watch
// does it.
func (p *Pool) heartbeat(stop <-chan struct{}) {
	tick := time.NewTicker(p.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			tasks := p.held()
			p.watch(tasks)
			if p.d.Capabilities().Extend {
				p.extendRunning(tasks)
			}
		}
	}
}

const extendBatch = 500

// held returns the jobs the pool holds, running or waiting to start.
func (p *Pool) held() []*task {
	p.mu.Lock()
	defer p.mu.Unlock()
	tasks := make([]*task, 0, len(p.running))
	for _, t := range p.running {
		tasks = append(tasks, t)
	}
	return tasks
}

func (p *Pool) extendRunning(tasks []*task) {
	// One Extend call per lease length: jobs with their own visibility
	// timeout are extended apart from the pool's.
	byVT := map[time.Duration][]*task{}
	for _, t := range tasks {
		byVT[t.vt] = append(byVT[t.vt], t)
	}
	for _, ts := range byVT {
		for len(ts) > 0 {
			n := min(len(ts), extendBatch)
			p.extend(ts[:n], false)
			ts = ts[n:]
		}
	}
}

// leaseFor returns the lease a delivery's job gets: the visibility timeout
// its message asks for, raised to two heartbeats so the heartbeat can keep
// it, or the pool's.
func (p *Pool) leaseFor(d *broker.Delivery) time.Duration {
	// Most jobs have no lease of their own: looking first spares the parse
	// error VisibilityTimeoutOf would allocate for the missing header.
	if _, set := d.Headers[conveyor.HeaderVisibilityTimeout]; !set {
		return p.cfg.VisibilityTimeout
	}
	vt, ok := conveyor.VisibilityTimeoutOf(&d.Message)
	if !ok {
		return p.cfg.VisibilityTimeout
	}
	return max(vt, 2*p.cfg.HeartbeatInterval)
}

// extend renews the leases of tasks, which share one lease length, to now
// plus that length. Unless set is true (a job's own lease at its start), a
// lease already longer than that (Job.Extend with a long ttl) is left
// alone until it gets that short, and a task whose lease Job.Extend is
// renewing right now is left to that call.
//
// No task lock is held across the round trip, only each task's extending
// lock: a handler that returns meanwhile is settled at once, and a cancel
// (shutdown, another lease lost) reaches it at once. A job settled while
// its extension was under way may see the extension refused; that says
// nothing about its lease, so it is not reported.
func (p *Pool) extend(tasks []*task, set bool) {
	vt := tasks[0].vt
	horizon := time.Now().Add(vt)
	var live []*task
	for _, t := range tasks {
		if set {
			t.extending.Lock()
		} else if !t.extending.TryLock() {
			continue // Job.Extend is renewing it
		}
		t.mu.Lock()
		// A job whose handler returned is being settled: its lease is the
		// settle's business now.
		skip := t.released || t.returned || t.abandoned || t.job.Settled() || (!set && t.d.LeaseDeadline.After(horizon))
		t.mu.Unlock()
		if skip {
			t.extending.Unlock()
			continue
		}
		live = append(live, t) // extending stays locked until the extension is done
	}
	if len(live) == 0 {
		return
	}
	ds := make([]*broker.Delivery, len(live))
	for i, t := range live {
		ds[i] = t.d
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.HeartbeatInterval)
	errs := perDelivery(ds, p.cons.Extend(ctx, vt, ds...))
	cancel()
	now := time.Now()
	for i, t := range live {
		if errors.Is(errs[i], broker.ErrJobCanceled) {
			// Extended, and cancelled: a notice the watch missed.
			errs[i] = nil
			p.cancelTask(t)
		}
		t.mu.Lock()
		settling := t.released || t.returned || t.job.Settled()
		// Without a fresh lease, stop before the deadline passes: the next
		// heartbeat would come too late.
		lost := !settling && (errors.Is(errs[i], broker.ErrLeaseLost) ||
			(errs[i] != nil && now.Add(p.cfg.HeartbeatInterval).After(t.d.LeaseDeadline)))
		if lost {
			t.lost = true // a job still waiting to start is skipped
		}
		cancelJob := t.cancel
		t.mu.Unlock()
		t.extending.Unlock()
		if errs[i] != nil && !settling {
			p.log.Warn("lease extension failed", append(p.jobAttrs(t.d), "error", errs[i], "lost", lost)...)
		}
		if lost && cancelJob != nil {
			cancelJob(broker.ErrLeaseLost)
		}
	}
}
