package worker

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/runjob"
)

// cancelRewatch is how long the pool waits before it subscribes to cancels
// again after the subscription failed or broke.
const cancelRewatch = time.Second

// startCancelWatch, on a driver that can cancel jobs, watches the pool's
// queues for jobs cancelled in flight until ctx ends, and cancels those
// the pool holds (see cancelHeld). The first subscription is made before
// it returns, so that a job the pool fetches after is covered; if it
// fails, the watch is tried again in the background, every second. A
// notice lost while the subscription is down is made up for by the
// heartbeat: every extension reports a cancelled job.
func (p *Pool) startCancelWatch(ctx context.Context) {
	cn, ok := p.d.(broker.Canceler)
	if !ok || !p.d.Capabilities().Cancel {
		return
	}
	queues := p.cfg.queueNames()
	watch := func() <-chan broker.CanceledJob {
		ch, err := cn.WatchCancels(ctx, queues...)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("watching for cancelled jobs failed; the heartbeat still finds them", "error", err)
		}
		return ch
	}
	ch := watch()
	go func() {
		for {
			if ch != nil { // nil: the watch failed
				for n := range ch {
					p.cancelHeld(n)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(cancelRewatch):
			}
			ch = watch()
		}
	}()
}

// cancelHeld cancels the job of n if the pool holds its delivery: a
// running one's context is cancelled with cause conveyor.ErrJobCanceled,
// one waiting to start never starts. Either way the job is acked when its
// handler leaves it unsettled, not retried (settleCanceled). Another job
// under the same ID is left alone: the notice names the delivery.
func (p *Pool) cancelHeld(n broker.CanceledJob) {
	p.mu.Lock()
	var ts []*task
	for d, t := range p.running {
		if d.ID == n.ID && d.Queue == n.Queue && d.Receipt == n.Delivery {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		p.remember(n.Delivery)
	}
	p.mu.Unlock()
	for _, t := range ts {
		p.cancelTask(t)
	}
}

// earlyMax bounds the notices for deliveries the pool does not hold that
// it keeps (every pool of a queue gets every notice); when full, those
// older than earlyKeep go, or all of them: a notice overtakes its fetch's
// reply by far less.
const (
	earlyKeep = 10 * time.Second
	earlyMax  = 10000
)

// remember keeps a notice for a delivery the pool does not hold, in case
// the reply of the fetch that leased it is still on its way; p.mu is held.
func (p *Pool) remember(receipt string) {
	now := time.Now()
	if p.early == nil {
		p.early = make(map[string]time.Time)
	}
	if len(p.early) >= earlyMax { // pruned only when full: a notice costs O(1)
		for r, at := range p.early {
			if now.Sub(at) > earlyKeep {
				delete(p.early, r)
			}
		}
		if len(p.early) >= earlyMax {
			clear(p.early)
		}
	}
	p.early[receipt] = now
}

// cancelTask marks t cancelled and cancels its handler's context, once.
func (p *Pool) cancelTask(t *task) {
	t.mu.Lock()
	first := !t.canceled
	t.canceled = true
	cancel := t.cancel
	t.mu.Unlock()
	if !first {
		return
	}
	p.log.Info("job canceled", p.jobAttrs(t.d)...)
	if cancel != nil {
		cancel(conveyor.ErrJobCanceled)
	}
}

// settleCanceled ends a cancelled job its handler left unsettled with an
// error (most handlers return their context's). The job is acked, so it is
// removed and never retried, whatever the pool's retry rules say.
func (p *Pool) settleCanceled(t *task) conveyor.Settlement {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.mu.Lock()
	t.ackCanceled = true // its record says so
	t.mu.Unlock()
	err := t.job.Ack(ctx)
	if err != nil {
		p.log.Warn("ack of a canceled job failed", append(p.jobAttrs(t.d), "error", err)...)
	}
	return runjob.Settled(conveyor.Settlement{Outcome: conveyor.OutcomeCanceled}, err)
}
