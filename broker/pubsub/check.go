package pubsub

import (
	"context"

	"github.com/conveyorq/conveyor/internal/redischeck"
)

// Check pings the server and verifies it is Redis 7.0 or later (sharded
// pub/sub needs it), so that a process fails at start with a clear error
// rather than on first use.
func (d *Driver) Check(ctx context.Context) error {
	return redischeck.Check(ctx, d.rdb, d.log, "pubsub")
}
