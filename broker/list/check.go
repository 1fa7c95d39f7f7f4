package list

import (
	"context"

	"github.com/conveyorq/conveyor/internal/redischeck"
)

// Check verifies that Redis is reachable and at least 7.0, and warns (on the
// configured logger) when maxmemory-policy lets Redis evict keys: an evicted
// lease ZSET loses the messages in flight.
func (d *Driver) Check(ctx context.Context) error {
	return redischeck.Check(ctx, d.client, d.log, "list")
}
