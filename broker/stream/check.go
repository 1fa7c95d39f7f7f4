package stream

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

// Check verifies that Redis is reachable and at least 7.0 (XAUTOCLAIM reports
// entries deleted while pending from 7.0 on), warns when maxmemory-policy
// is not noeviction (an evicted stream or delayed set loses jobs), and asks
// the server whether the connection's ACL user may send every command the
// driver sends, on its keys and channels: one script call that reads and
// writes nothing. The error names each command, key pattern or channel the
// ACL refuses.
func (d *Driver) Check(ctx context.Context) error {
	if err := redischeck.Check(ctx, d.rdb, d.cfg.Logger, "stream"); err != nil {
		return err
	}
	return redischeck.Permissions(ctx, d.rdb, d.cfg.Logger, "stream", d.wait.Needs(d.needs()))
}

// needs are the commands the stream driver sends (see
// redischeck.Durable), with those of its streams and consumer group, from
// its scripts and from Go (the wait on a missing stream's creation is an
// XREAD); check_test.go holds them to the scripts' text and to the
// package's source.
func (d *Driver) needs() []redischeck.Need {
	k := d.keys(redischeck.ProbeQueue)
	s, g := k.stream, d.cfg.Group
	key := func(cmd string, args ...string) redischeck.Need { return redischeck.Key(s, cmd, args...) }
	return append(append(redischeck.Durable(d.cfg.Prefix),
		key("XADD", s, "*", "m", "v"),
		key("XLEN", s),
		key("XRANGE", s, "-", "+"),
		key("XREVRANGE", s, "+", "-"),
		key("XDEL", s, "0-1"),
		key("XGROUP CREATE", s, g, "0"),
		key("XGROUP DELCONSUMER", s, g, "c"),
		key("XINFO GROUPS", s),
		key("XINFO CONSUMERS", s, g),
		key("XREADGROUP", "GROUP", g, "c", "STREAMS", s, ">"),
		key("XREAD", "STREAMS", s, "0-0"),
		key("XPENDING", s, g),
		key("XACK", s, g, "0-1"),
		key("XCLAIM", s, g, "c", "0", "0-1"),
		key("XAUTOCLAIM", s, g, "c", "0", "0"),
		key("EXISTS", s),
		redischeck.Key(k.paused, "EXISTS", k.paused),
		redischeck.Key(k.limits.Max, "EXISTS", k.limits.Max),
		key("DEL", s),
	), slices.Concat(reclaims.Needs(k.reclaimed), cancels.Needs(k.canceled, k.cancels), records.Needs(k.records), workers.Needs(d.cfg.Prefix),
		wake.Needs(k.wake), elect.Needs(k.keeper, k.heir))...)
}
