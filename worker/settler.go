package worker

import (
	"context"
	"time"

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
	return s.p.cons.Discard(ctx, d, reason)
}

func (s settler) Extend(ctx context.Context, d *broker.Delivery, ttl time.Duration) error {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.p.cons.Extend(ctx, ttl, d)
}
