package worker

import (
	"context"
	"log/slog"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
)

// startPromoter runs a delay.Promoter for the pool's queue until ctx ends
// (the pool stops fetching), unless the config turns it off or the driver
// has no timers. The channel it returns is closed when the promoter is done.
func (p *Pool) startPromoter(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if _, ok := p.d.(broker.Timers); p.cfg.NoPromoter || !ok || !p.d.Capabilities().Delay {
		close(done)
		return done
	}
	pr, err := delay.NewPromoter(p.d, p.cfg.Queue, &delay.PromoterConfig{Logger: p.cfg.Logger, OnPromote: p.cfg.OnPromote})
	if err != nil {
		p.cfg.Logger.LogAttrs(ctx, slog.LevelError, "worker: no promoter: delayed jobs wait for another process's",
			slog.String("queue", p.cfg.Queue), slog.String("error", err.Error()))
		close(done)
		return done
	}
	go func() {
		defer close(done)
		_ = pr.Run(ctx)
	}()
	return done
}
