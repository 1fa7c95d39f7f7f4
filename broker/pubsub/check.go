package pubsub

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/conveyorq/conveyor/broker"
)

// minMajor is the oldest Redis major version the driver supports: sharded
// pub/sub and the rest of Conveyor need 7.0.
const minMajor = 7

// Check pings the server and verifies it is Redis 7.0 or later, so that a
// process fails at start with a clear error rather than on first use.
func (d *Driver) Check(ctx context.Context) error {
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("pubsub: check: ping: %w", err)
	}
	info, err := d.rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("pubsub: check: info: %w", err)
	}
	version, ok := infoField(info, "redis_version")
	if !ok {
		return fmt.Errorf("pubsub: check: INFO server has no redis_version")
	}
	major, err := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	if err != nil {
		return fmt.Errorf("pubsub: check: unreadable redis_version %q", version)
	}
	if major < minMajor {
		return fmt.Errorf("pubsub: check: %w: server is %s, need %d.0 or later", broker.ErrRedisTooOld, version, minMajor)
	}
	return nil
}

// infoField returns the value of name in an INFO reply ("name:value" lines).
func infoField(info, name string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
