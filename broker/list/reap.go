package list

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// maxReapSteps bounds one Reap call; each step moves or scans up to
// Config.ReapBatch entries, so this is far beyond any real backlog.
const maxReapSteps = 1 << 16

// Reap runs crash recovery on queue once: it hands every message whose lease
// ran out back to the front of the ready list, and sweeps the whole
// in-flight hash for entries without a lease (lost to eviction or a
// failover), handing those back too. Each counts a recovery. Consumers do
// both on their own (expired leases on every fetch, the sweep once per
// visibility timeout); Reap is for tests and operators. Any number of Reap
// calls and consumers may run at once: each message is moved once.
func (d *Driver) Reap(ctx context.Context, queue string) (requeued int, err error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("list: reap: %w", err)
	}
	k := d.keys(queue)
	cursor := "0"
	for range maxReapSteps {
		next, expired, orphans, err := d.reapStep(ctx, k, cursor)
		if err != nil {
			return requeued, fmt.Errorf("list: reap: %w", err)
		}
		requeued += expired + orphans
		cursor = next
		if cursor == "0" && expired < d.cfg.ReapBatch {
			return requeued, nil
		}
	}
	return requeued, nil
}

// reapStep runs reap.lua once from cursor.
func (d *Driver) reapStep(ctx context.Context, k *queueKeys, cursor string) (next string, expired, orphans int, err error) {
	v, err := reapScript.Run(ctx, d.client, k.reap, cursor, d.cfg.ReapBatch, d.cfg.ReapBatch)
	if err != nil {
		return "", 0, 0, err
	}
	reply, _ := v.([]any)
	if len(reply) != 3 {
		return "", 0, 0, fmt.Errorf("reap.lua replied %v", v)
	}
	next, ok0 := reply[0].(string)
	e, ok1 := reply[1].(int64)
	o, ok2 := reply[2].(int64)
	if !ok0 || !ok1 || !ok2 {
		return "", 0, 0, fmt.Errorf("reap.lua replied %v", v)
	}
	return next, int(e), int(o), nil
}

// maybeSweep runs one step of the lease-less sweep when one is due: the
// first Fetch sweeps at once, then a pass (one step per Fetch until the
// cursor comes back to 0) starts every visibility timeout. Sweeping is best
// effort: a failure is logged and the fetch goes on.
func (c *consumer) maybeSweep(ctx context.Context) {
	now := time.Now().UnixNano()
	if now < c.nextSweep.Load() || !c.sweepMu.TryLock() {
		return
	}
	defer c.sweepMu.Unlock()
	next, expired, orphans, err := c.d.reapStep(ctx, c.k, c.sweepCursor)
	if err != nil {
		if ctx.Err() == nil {
			c.d.log.WarnContext(ctx, "list: sweep of in-flight entries failed", "queue", c.queue, "err", err)
		}
		c.nextSweep.Store(now + int64(c.vt))
		return
	}
	if orphans > 0 {
		c.d.log.WarnContext(ctx, "list: requeued in-flight messages that had no lease (evicted or lost in a failover?)",
			"queue", c.queue, "count", orphans)
	}
	if expired > 0 {
		c.d.log.InfoContext(ctx, "list: requeued messages whose lease ran out", "queue", c.queue, "count", expired)
	}
	c.sweepCursor = next
	if next == "0" {
		c.nextSweep.Store(now + int64(c.vt))
	}
}
