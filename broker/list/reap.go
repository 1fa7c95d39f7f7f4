package list

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/broker"
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
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("list: reap: %w", err)
	}
	k := d.keys(queue)
	poisoned := int64(0)
	defer func() { d.logPoisoned(ctx, queue, poisoned) }()
	for range maxReapSteps {
		v, err := reapScript.Run(ctx, d.client, k.reap, d.cfg.ReapBatch, d.cfg.MaxRecoveries, d.cfg.DiscardMax, d.Keeper.Retention.AgeArg())
		if err != nil {
			return requeued, fmt.Errorf("list: reap: %w", err)
		}
		reply, ok := v.([]any)
		if !ok || len(reply) != 2 {
			return requeued, fmt.Errorf("list: reap: reap.lua replied %v", v)
		}
		n, ok1 := reply[0].(int64)
		p, ok2 := reply[1].(int64)
		if !ok1 || !ok2 {
			return requeued, fmt.Errorf("list: reap: reap.lua replied %v", v)
		}
		requeued += int(n)
		poisoned += p
		// A step that took fewer than it may have emptied what was due.
		if int(n+p) < d.cfg.ReapBatch {
			return requeued, nil
		}
	}
	return requeued, nil
}

// logPoisoned warns of messages recovery discarded as poison: each took its
// worker down Config.MaxRecoveries times, which an operator should look at.
func (d *Driver) logPoisoned(ctx context.Context, queue string, n int64) {
	if n > 0 {
		d.log.WarnContext(ctx, "list: poison messages discarded", "count", n, "queue", queue)
	}
}
