package conveyor

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/broker"
)

// SetLimit sets how many jobs of kind may run at once across the fleet on
// queue (all the queue's jobs when kind is ""), from 1 to broker.MaxLimit;
// 0 removes the limit. The limit is kept in Redis, so every pool obeys it
// from its next fetch, and it lasts until changed.
//
// A job takes a slot of each limit that applies when a pool fetches it and
// gives it back when it ends: acked, retried, postponed, discarded, handed
// back, or recovered after its worker died (within the visibility
// timeout). A job fetched over a limit waits in the limit's line, outside
// the queue, without counting an attempt and without polling, until a slot
// comes back. A raised or removed limit lets waiting jobs in at once; a
// lowered one takes effect as running jobs end. docs/concurrency.md is the
// guide.
func (i *Inspector) SetLimit(ctx context.Context, queue, kind string, n int) error {
	l, err := i.limiter("set limit", queue)
	if err != nil {
		return err
	}
	if err := broker.ValidateLimit(queue, kind, n); err != nil {
		return err
	}
	if err := l.SetLimit(ctx, queue, kind, n); err != nil {
		return fmt.Errorf("conveyor: inspector: %w", err)
	}
	return nil
}

// Limits reports queue's concurrency limits with the slots each holds and
// the jobs waiting for one: the queue's own limit (Kind "") first, then by
// kind.
func (i *Inspector) Limits(ctx context.Context, queue string) ([]broker.Limit, error) {
	l, err := i.limiter("limits", queue)
	if err != nil {
		return nil, err
	}
	ls, err := l.Limits(ctx, queue)
	if err != nil {
		return nil, fmt.Errorf("conveyor: inspector: %w", err)
	}
	return ls, nil
}

// limiter returns the driver's broker.Limiter for op on queue.
func (i *Inspector) limiter(op, queue string) (broker.Limiter, error) {
	if err := checkQueue(op, queue); err != nil {
		return nil, err
	}
	l, ok := i.d.(broker.Limiter)
	if !ok || !i.d.Capabilities().Limits {
		return nil, fmt.Errorf("conveyor: inspector: %s: driver %T has no concurrency limits: %w", op, i.d, broker.ErrUnsupported)
	}
	return l, nil
}
