package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// settler carries out a job's settle calls for the pool: acks share round
// trips with other jobs' acks, and extensions are serialised with the
// heartbeat's.
type settler struct {
	p *Pool
	t *task
}

func (s settler) Ack(ctx context.Context, d *broker.Delivery) error {
	return s.p.acks.Do(ctx, d)
}

func (s settler) Retry(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return s.p.cons.Retry(ctx, d, at)
}

func (s settler) Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return s.p.cons.Postpone(ctx, d, at)
}

func (s settler) Discard(ctx context.Context, d *broker.Delivery, reason string) error {
	err := s.p.cons.Discard(ctx, d, reason)
	if err == nil && s.p.cfg.OnDiscard != nil {
		s.p.onDiscard(ctx, s.t.job, reason)
	}
	return err
}

// onDiscard runs the OnDiscard hook for a stored discard.
func (p *Pool) onDiscard(ctx context.Context, job *conveyor.Job, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			p.log.Warn("OnDiscard hook panicked", "queue", job.Queue, "kind", job.Kind, "job_id", job.ID,
				"attempt", job.Attempt(), "panic", fmt.Sprint(r))
		}
	}()
	p.cfg.OnDiscard(ctx, job, reason)
}

func (s settler) Extend(ctx context.Context, d *broker.Delivery, ttl time.Duration) error {
	s.t.extending.Lock()
	defer s.t.extending.Unlock()
	err := s.p.cons.Extend(ctx, ttl, d)
	if errors.Is(err, broker.ErrJobCanceled) {
		s.p.cancelTask(s.t) // the pool ends the job as cancelled, whatever the handler returns
	}
	return err
}
