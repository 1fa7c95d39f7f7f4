package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
)

// startKeepers runs the upkeep of each of the pool's queues until ctx ends
// (the pool stops fetching) and closes the channel it returns when all are
// done.
func (p *Pool) startKeepers(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var chans []<-chan struct{}
	for _, q := range p.cfg.queueNames() {
		chans = append(chans, p.startKeeper(ctx, q))
	}
	go func() {
		defer close(done)
		for _, c := range chans {
			<-c
		}
	}()
	return done
}

// startKeeper runs the upkeep of queue until ctx ends and closes the
// channel it returns when done. With a driver that elects one keeper per
// queue (broker.Keeper) the pool campaigns, and while elected it promotes
// the queue's timers and runs the driver's upkeep (expired leases,
// broker.Upkeeper) when the driver asks; otherwise it promotes on its own,
// as every other pool of the queue does.
func (p *Pool) startKeeper(ctx context.Context, queue string) <-chan struct{} {
	k, ok := p.d.(broker.Keeper)
	if !ok {
		return p.startPromoter(ctx, queue)
	}
	done := make(chan struct{})
	log := p.queueLog(queue)
	go func() {
		defer close(done)
		err := k.Campaign(ctx, queue, p.id, func(ctx context.Context) {
			log.LogAttrs(ctx, slog.LevelDebug, "worker: elected the queue's keeper", slog.String("worker_id", p.id))
			promoted := p.startPromoter(ctx, queue)
			sampled := p.startHistory(ctx, queue)
			if u, ok := p.d.(broker.Upkeeper); ok {
				p.upkeep(ctx, u, queue)
			}
			<-promoted
			<-sampled
		})
		if err != nil {
			log.LogAttrs(ctx, slog.LevelError, "worker: cannot campaign for the queue's upkeep; other pools do it",
				slog.String("error", err.Error()))
		}
	}()
	return done
}

// queueLog returns the pool's logger for records about queue: it names the
// queue unless the pool's logger does (a pool of one queue).
func (p *Pool) queueLog(queue string) *slog.Logger {
	if p.cfg.Queue != "" {
		return p.log
	}
	return p.log.With("queue", queue)
}

// upkeep calls k.Upkeep for queue when it asks until ctx ends. Errors are
// logged and retried with a backoff of up to broker.UpkeepEvery.
func (p *Pool) upkeep(ctx context.Context, k broker.Upkeeper, queue string) {
	t := time.NewTimer(0)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := k.Upkeep(ctx, queue)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, 10*time.Millisecond), broker.UpkeepEvery)
			next = backoff
			p.queueLog(queue).LogAttrs(ctx, slog.LevelWarn, "worker: queue upkeep failed",
				slog.String("error", err.Error()), slog.Duration("retry_in", next))
		} else {
			backoff = 0
		}
		t.Reset(next)
	}
}

// startPromoter runs a delay.Promoter for queue until ctx ends, unless the
// config turns it off or the driver has no timers. The channel it returns
// is closed when the promoter is done.
func (p *Pool) startPromoter(ctx context.Context, queue string) <-chan struct{} {
	done := make(chan struct{})
	if _, ok := p.d.(broker.Timers); p.cfg.NoPromoter || !ok || !p.d.Capabilities().Delay {
		close(done)
		return done
	}
	pr, err := delay.NewPromoter(p.d, queue, &delay.PromoterConfig{Logger: p.cfg.Logger, OnPromote: p.cfg.OnPromote})
	if err != nil {
		p.cfg.Logger.LogAttrs(ctx, slog.LevelError, "worker: no promoter: delayed jobs wait for another process's",
			slog.String("queue", queue), slog.String("error", err.Error()))
		close(done)
		return done
	}
	go func() {
		defer close(done)
		_ = pr.Run(ctx)
	}()
	return done
}

// startHistory records queue's history (broker.Historian) while ctx lasts,
// one sample each Config.HistoryEvery, unless the config or the driver
// keeps none. The channel it returns is closed when it is done.
func (p *Pool) startHistory(ctx context.Context, queue string) <-chan struct{} {
	done := make(chan struct{})
	h, ok := p.d.(broker.Historian)
	insp, ok2 := p.d.(broker.Inspector)
	if !ok || !ok2 || !p.d.Capabilities().History || p.cfg.HistoryEvery < 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			next, err := p.sample(ctx, h, insp, queue)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.queueLog(queue).LogAttrs(ctx, slog.LevelWarn, "worker: queue history sample failed",
					slog.String("error", err.Error()))
			}
			t.Reset(next)
		}
	}()
	return done
}

// sample reads queue's sizes and records them as a sample of its history.
// It returns when to sample next: just after the next interval starts by
// the server's clock, or an interval from now when Redis did not answer.
func (p *Pool) sample(ctx context.Context, h broker.Historian, insp broker.Inspector, queue string) (time.Duration, error) {
	every := p.cfg.HistoryEvery
	s, err := insp.QueueSizes(ctx, queue)
	if err != nil {
		return every, err
	}
	r, err := h.RecordSample(ctx, s[0], every, p.cfg.HistoryKeep)
	if err != nil {
		return every, err
	}
	return r.Next + every/100, nil
}
