package list

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/elect"
)

var (
	_ broker.Keeper   = (*Driver)(nil)
	_ broker.Upkeeper = (*Driver)(nil)
)

// maxReapSteps bounds one Reap call; each step moves up to Config.ReapBatch
// messages, so this is far beyond any real backlog.
const maxReapSteps = 1 << 16

// Reap runs crash recovery on queue once: it hands every message whose lease
// ran out back to the front of the ready list, each counting a recovery,
// and returns how many it handed back. A message whose recoveries would
// reach Config.MaxRecoveries goes to the discard list as poison instead; it
// is not counted in requeued (the poison discards are logged at Warn).
// Consumers do this on their own (on every fetch); Reap is for tests and
// operators. Any number of Reap calls and consumers may run at once: each
// message is moved once. There is no in-flight entry without a lease to
// sweep for: the lease ZSET is the in-flight structure.
func (d *Driver) Reap(ctx context.Context, queue string) (requeued int, err error) {
	requeued, _, err = d.reap(ctx, queue)
	return requeued, err
}

// reap runs reap.lua until it took fewer than a batch, and returns what
// its last step said of the next lease deadline (-1: none in flight).
func (d *Driver) reap(ctx context.Context, queue string) (requeued int, next time.Duration, err error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, 0, fmt.Errorf("list: reap: %w", err)
	}
	k := d.keys(queue)
	poisoned := int64(0)
	defer func() { d.logPoisoned(ctx, queue, poisoned) }()
	for range maxReapSteps {
		v, err := reapScript.Run(ctx, d.client, k.reap, d.cfg.ReapBatch, d.cfg.MaxRecoveries, d.cfg.DiscardMax, d.Keeper.Retention.AgeArg())
		if err != nil {
			return requeued, 0, fmt.Errorf("list: reap: %w", err)
		}
		reply, ok := v.([]any)
		if !ok || len(reply) != 3 {
			return requeued, 0, fmt.Errorf("list: reap: reap.lua replied %v", v)
		}
		n, ok1 := reply[0].(int64)
		p, ok2 := reply[1].(int64)
		ms, ok3 := reply[2].(int64)
		if !ok1 || !ok2 || !ok3 {
			return requeued, 0, fmt.Errorf("list: reap: reap.lua replied %v", v)
		}
		requeued += int(n)
		poisoned += p
		next = time.Duration(ms) * time.Millisecond
		// A step that took fewer than it may have emptied what was due.
		if int(n+p) < d.cfg.ReapBatch {
			break
		}
	}
	return requeued, next, nil
}

// Upkeep implements broker.Upkeeper: it hands back the queue's expired
// leases (Reap), sets the wake signal when ready holds messages, and asks
// to run again at the next lease deadline, or within broker.UpkeepEvery.
// It costs one reap.lua call (five commands) when nothing expired.
func (d *Driver) Upkeep(ctx context.Context, queue string) (time.Duration, error) {
	n, next, err := d.reap(ctx, queue)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		d.log.InfoContext(ctx, "list: requeued messages whose lease ran out", "queue", queue, "count", n)
	}
	if next < 0 || next > broker.UpkeepEvery {
		next = broker.UpkeepEvery
	}
	return next, nil
}

// Campaign implements broker.Keeper: the election of a queue's keeper
// (internal/elect) on the queue's keys <prefix>:{<queue>}:keeper and
// :keeper_heir.
func (d *Driver) Campaign(ctx context.Context, queue, id string, lead func(ctx context.Context)) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return fmt.Errorf("list: campaign: %w", err)
	}
	k := d.keys(queue)
	e, err := elect.New(d.client, id, elect.Config{Lease: k.keeper, Heir: k.heir, Logger: d.log})
	if err != nil {
		return fmt.Errorf("list: campaign: %w", err)
	}
	return e.Run(ctx, lead)
}

// logPoisoned warns of messages recovery discarded as poison: each took its
// worker down Config.MaxRecoveries times, which an operator should look at.
func (d *Driver) logPoisoned(ctx context.Context, queue string, n int64) {
	if n > 0 {
		d.log.WarnContext(ctx, "list: poison messages discarded", "count", n, "queue", queue)
	}
}
