package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/elect"
	"github.com/conveyorq/conveyor/internal/wake"
)

var (
	_ broker.Keeper   = (*Driver)(nil)
	_ broker.Upkeeper = (*Driver)(nil)
)

// Campaign implements broker.Keeper: the election of a queue's keeper
// (internal/elect) on the queue's keys <prefix>:{<queue>}:keeper and
// :keeper_heir. A worker pool campaigns, and only the elected pool of a
// fleet promotes the queue's timers and runs Upkeep.
func (d *Driver) Campaign(ctx context.Context, queue, id string, lead func(ctx context.Context)) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return fmt.Errorf("stream: campaign: %w", err)
	}
	k := d.keys(queue)
	e, err := elect.New(d.rdb, id, elect.Config{Lease: k.keeper, Heir: k.heir, Logger: d.cfg.Logger})
	if err != nil {
		return fmt.Errorf("stream: campaign: %w", err)
	}
	return e.Run(ctx, lead)
}

// Upkeep implements broker.Upkeeper. A stream entry can only be taken over
// by the consumer that will run it, so the keeper does not take expired
// leases itself: it looks for one (XPENDING ... IDLE <vt> - + 1, one
// command, with the shortest visibility timeout of the consumers this
// driver opened) and, when there is one, sets the queue's reclaim signal
// {q}:reclaim (internal/wake). The consumer it wakes runs a takeover pass
// (XAUTOCLAIM); one that takes a full batch wakes the next. It asks to run
// again within broker.UpkeepEvery.
func (d *Driver) Upkeep(ctx context.Context, queue string) (time.Duration, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("stream: upkeep: %w", err)
	}
	k := d.keys(queue)
	vt := time.Duration(d.minVT.Load())
	if vt <= 0 {
		vt = broker.DefaultVisibilityTimeout
	}
	ps, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: k.stream, Group: d.cfg.Group, Idle: vt, Start: "-", End: "+", Count: 1,
	}).Result()
	switch {
	case err != nil && (errors.Is(err, redis.Nil) || strings.HasPrefix(err.Error(), "NOGROUP")):
		return broker.UpkeepEvery, nil // no stream yet: nothing in flight
	case err != nil:
		return 0, fmt.Errorf("stream: upkeep: %w", err)
	case len(ps) > 0:
		if err := wake.Signal(ctx, d.rdb, k.reclaim); err != nil {
			return 0, fmt.Errorf("stream: upkeep: %w", err)
		}
	}
	return broker.UpkeepEvery, nil
}
