package stream

import (
	"context"

	"github.com/conveyorq/conveyor/internal/redischeck"
)

// Check verifies that Redis is reachable and at least 7.0 (XAUTOCLAIM reports
// entries deleted while pending from 7.0 on), and warns when maxmemory-policy
// is not noeviction (an evicted stream or delayed set loses jobs).
func (d *Driver) Check(ctx context.Context) error {
	return redischeck.Check(ctx, d.rdb, d.cfg.Logger, "stream")
}
