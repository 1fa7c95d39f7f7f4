package worker

import (
	"context"
	"errors"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// heartbeat extends the leases of running jobs every HeartbeatInterval, in
// batches, until stop is closed. A job whose lease could not be kept (the
// driver says it is lost, or its deadline passed while Redis was out of
// reach) has its context cancelled with cause ErrLeaseLost: another worker
// may already run it, so this one should stop.
func (p *Pool) heartbeat(stop <-chan struct{}) {
	if !p.d.Capabilities().Extend {
		return
	}
	tick := time.NewTicker(p.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			p.extendRunning()
		}
	}
}

const extendBatch = 500

func (p *Pool) extendRunning() {
	p.mu.Lock()
	tasks := make([]*task, 0, len(p.running))
	for _, t := range p.running {
		tasks = append(tasks, t)
	}
	p.mu.Unlock()
	for len(tasks) > 0 {
		n := min(len(tasks), extendBatch)
		p.extend(tasks[:n])
		tasks = tasks[n:]
	}
}

func (p *Pool) extend(tasks []*task) {
	horizon := time.Now().Add(p.cfg.VisibilityTimeout)
	var live []*task
	for _, t := range tasks {
		t.mu.Lock()
		// A job whose handler returned is being settled: extending it would
		// race its settle.
		// A lease extended past what the heartbeat would give (Job.Extend
		// with a long ttl) is left alone until it gets that short.
		if t.released || t.returned || t.job.Settled() || t.d.LeaseDeadline.After(horizon) {
			t.mu.Unlock()
			continue
		}
		live = append(live, t) // stays locked until the extension is done
	}
	if len(live) == 0 {
		return
	}
	ds := make([]*broker.Delivery, len(live))
	for i, t := range live {
		ds[i] = t.d
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.HeartbeatInterval)
	errs := perDelivery(ds, p.cons.Extend(ctx, p.cfg.VisibilityTimeout, ds...))
	cancel()
	now := time.Now()
	for i, t := range live {
		// Without a fresh lease, stop before the deadline passes: the next
		// heartbeat would come too late.
		lost := errors.Is(errs[i], broker.ErrLeaseLost) ||
			(errs[i] != nil && now.Add(p.cfg.HeartbeatInterval).After(t.d.LeaseDeadline))
		if errs[i] != nil {
			p.log.Warn("lease extension failed", append(p.jobAttrs(t.d), "err", errs[i], "lost", lost)...)
		}
		if lost {
			t.lost = true // a job still waiting to start is skipped
			if t.cancel != nil {
				t.cancel(broker.ErrLeaseLost)
			}
		}
		t.mu.Unlock()
	}
}
