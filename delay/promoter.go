package delay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/logs"
)

// PromoterConfig configures a Promoter. The zero value is valid.
type PromoterConfig struct {
	// Batch is the most timers one promotion call moves; a call that moves
	// a full batch is followed at once by the next. Defaults to 1000 (the
	// most a call may move).
	Batch int
	// MaxSleep bounds a sleep with no timer due sooner, so that a lost
	// wake-up (a reconnection) delays a timer by at most this much. It is
	// the idle load too: one promotion call per MaxSleep. Defaults to 1s.
	MaxSleep time.Duration
	// Logger receives promotion errors. Defaults to slog.Default(),
	// warnings and above only.
	Logger *slog.Logger
	// OnPromote, when set, is called after each promotion call that moved
	// timers, with the queue and the call's outcome (how many, how late the
	// earliest was): the hook for metrics such as promotion lateness. It
	// runs on the promoter's goroutine and must be quick.
	OnPromote func(queue string, p broker.Promotion)
}

// Promoter moves the due timers of one queue to its ready structure at
// their due time. It sleeps until the next timer is due (the server says
// when, so a skewed local clock cannot make it early) and wakes early when a
// timer due sooner is added anywhere (the driver publishes a wake-up). Any
// number of promoters, in any number of processes, may run for one queue:
// each timer is promoted exactly once.
type Promoter struct {
	t        broker.Timers
	queue    string
	cfg      PromoterConfig
	promoted atomic.Int64
	calls    atomic.Int64
}

// NewPromoter returns a promoter for queue on d. It fails with
// broker.ErrUnsupported when d has no timers (the pubsub driver).
func NewPromoter(d broker.Driver, queue string, cfg *PromoterConfig) (*Promoter, error) {
	t, err := timersOf(d)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, fmt.Errorf("delay: promoter: %w", err)
	}
	p := &Promoter{t: t, queue: queue}
	if cfg != nil {
		p.cfg = *cfg
	}
	switch {
	case p.cfg.Batch < 0:
		return nil, errors.New("delay: promoter: Batch is negative")
	case p.cfg.MaxSleep < 0 || (p.cfg.MaxSleep > 0 && p.cfg.MaxSleep < 10*time.Millisecond):
		return nil, errors.New("delay: promoter: MaxSleep must be 0 (the default) or at least 10ms: it is the idle load")
	}
	if p.cfg.Batch == 0 || p.cfg.Batch > 1000 {
		p.cfg.Batch = 1000
	}
	if p.cfg.MaxSleep == 0 {
		p.cfg.MaxSleep = time.Second
	}
	if p.cfg.Logger == nil {
		p.cfg.Logger = logs.Default()
	}
	return p, nil
}

func timersOf(d broker.Driver) (broker.Timers, error) {
	t, ok := d.(broker.Timers)
	if !ok || !d.Capabilities().Delay {
		return nil, fmt.Errorf("delay: driver %T has no timers: %w", d, broker.ErrUnsupported)
	}
	return t, nil
}

// PromoterStats counts a promoter's work since it was made.
type PromoterStats struct {
	Promoted int64 // timers this promoter moved
	Calls    int64 // promotion calls (round trips) it made
}

// Stats returns the promoter's counters.
func (p *Promoter) Stats() PromoterStats {
	return PromoterStats{Promoted: p.promoted.Load(), Calls: p.calls.Load()}
}

// Run promotes until ctx ends, then returns nil. Redis errors are logged
// and retried with a backoff of up to MaxSleep; they never end Run.
func (p *Promoter) Run(ctx context.Context) error {
	var (
		wake      <-chan struct{}
		nextWatch time.Time // a failed subscription is tried again at most once per MaxSleep
	)
	watch := func() {
		if time.Now().Before(nextWatch) {
			return
		}
		nextWatch = time.Now().Add(p.cfg.MaxSleep)
		ch, err := p.t.WatchTimers(ctx, p.queue)
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "delay: promoter: watching for new timers failed; sleeping at most MaxSleep",
					slog.String("queue", p.queue), slog.String("error", err.Error()))
			}
			return
		}
		wake = ch
	}
	watch()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if wake == nil {
			watch()
		}
		r, err := p.t.Promote(ctx, p.queue, p.cfg.Batch)
		p.calls.Add(1)
		sleep := p.cfg.MaxSleep
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, 10*time.Millisecond), p.cfg.MaxSleep)
			sleep = backoff
			p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "delay: promoter: promotion failed",
				slog.String("queue", p.queue), slog.String("error", err.Error()), slog.Duration("retry_in", sleep))
		default:
			backoff = 0
			p.promoted.Add(int64(r.Promoted))
			if r.Promoted > 0 && p.cfg.OnPromote != nil {
				p.cfg.OnPromote(p.queue, r)
			}
			if r.Promoted >= p.cfg.Batch || r.Next == 0 {
				continue // more are due now
			}
			if r.Next > 0 && r.Next < sleep {
				sleep = r.Next
			}
		}
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case _, ok := <-wake:
			if !ok {
				wake = nil // the subscription ended: watch again
			}
			// No drain: since Go 1.23 Reset discards a pending tick.
		}
	}
	return nil
}
