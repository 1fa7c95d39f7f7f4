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
// ran out back to the front of the ready list, each counting a recovery.
// Consumers do this on their own (on every fetch); Reap is for tests and
// operators. Any number of Reap calls and consumers may run at once: each
// message is moved once. There is no in-flight entry without a lease to
// sweep for: the lease ZSET is the in-flight structure.
func (d *Driver) Reap(ctx context.Context, queue string) (requeued int, err error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("list: reap: %w", err)
	}
	k := d.keys(queue)
	for range maxReapSteps {
		v, err := reapScript.Run(ctx, d.client, k.reap, d.cfg.ReapBatch)
		if err != nil {
			return requeued, fmt.Errorf("list: reap: %w", err)
		}
		n, ok := v.(int64)
		if !ok {
			return requeued, fmt.Errorf("list: reap: reap.lua replied %v", v)
		}
		requeued += int(n)
		if int(n) < d.cfg.ReapBatch {
			return requeued, nil
		}
	}
	return requeued, nil
}
