package list

import (
	"context"
	"slices"

	"github.com/conveyorq/conveyor/internal/cancels"
	"github.com/conveyorq/conveyor/internal/elect"
	"github.com/conveyorq/conveyor/internal/reclaims"
	"github.com/conveyorq/conveyor/internal/records"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/wake"
	"github.com/conveyorq/conveyor/internal/workers"
)

// Check verifies that Redis is reachable and at least 7.0, warns (on the
// configured logger) when maxmemory-policy lets Redis evict keys (an evicted
// lease ZSET loses the messages in flight), and asks the server whether the
// connection's ACL user may send every command the driver sends, on its
// keys and channels: one script call that reads and writes nothing. The
// error names each command, key pattern or channel the ACL refuses.
func (d *Driver) Check(ctx context.Context) error {
	if err := redischeck.Check(ctx, d.client, d.log, "list"); err != nil {
		return err
	}
	return redischeck.Permissions(ctx, d.client, d.log, "list", d.wait.Needs(needs(d.cfg.Prefix)))
}

// needs are the commands the list driver sends (see redischeck.Durable),
// with those of its ready LIST, lease ZSET, inflight HASH and record of
// reclaimed receipts; check_test.go holds them to the scripts' text.
func needs(prefix string) []redischeck.Need {
	k := newQueueKeys(prefix, redischeck.ProbeQueue)
	key := redischeck.Key
	return append(append(redischeck.Durable(prefix),
		key(k.paused, "EXISTS", k.paused),
		key(k.ready, "LPUSH", k.ready, "m"),
		key(k.ready, "RPUSH", k.ready, "m"),
		key(k.ready, "RPOP", k.ready),
		key(k.ready, "LLEN", k.ready),
		key(k.ready, "LRANGE", k.ready, "0", "0"),
		key(k.ready, "LTRIM", k.ready, "0", "0"),
		key(k.lease, "ZADD", k.lease, "0", "m"),
		key(k.lease, "ZREM", k.lease, "m"),
		key(k.lease, "ZMSCORE", k.lease, "m"),
		key(k.lease, "ZRANGE", k.lease, "0", "0"),
		key(k.lease, "ZRANGEBYSCORE", k.lease, "0", "0"),
		key(k.lease, "ZCARD", k.lease),
		key(k.inflight, "HSET", k.inflight, "f", "v"),
		key(k.inflight, "HGET", k.inflight, "f"),
		key(k.inflight, "HEXISTS", k.inflight, "f"), // a cancel
		key(k.ready, "LREM", k.ready, "1", "m"),     // a cancel
		key(k.inflight, "HMGET", k.inflight, "f"),
		key(k.inflight, "HDEL", k.inflight, "f"),
		key(k.inflight, "HSCAN", k.inflight, "0"), // a lost fetch's hand-back
	), slices.Concat(reclaims.Needs(k.reclaimed), cancels.Needs(k.canceled, k.cancels), records.Needs(k.records), workers.Needs(prefix), wake.Needs(k.wake), elect.Needs(k.keeper, k.heir))...)
}
