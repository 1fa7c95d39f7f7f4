package list

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/internal/partitions"
)

// RecordPartitions records n (1 to 1,024) as queue's partition count unless
// a count is recorded already, and returns the recorded count: one SET ...
// NX GET of <prefix>:{<queue>}:partitions, kept until the queue is deleted.
// It implements shard.Recorder, with which a shard.Driver refuses a queue
// whose count changed.
func (d *Driver) RecordPartitions(ctx context.Context, queue string, n int) (int, error) {
	got, err := partitions.Record(ctx, d.client, d.cfg.Prefix, queue, n)
	if err != nil {
		return 0, fmt.Errorf("list: %w", err)
	}
	return got, nil
}
