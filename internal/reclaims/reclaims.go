// Package reclaims holds the record of reclaimed leases that the list and
// stream drivers share: a bounded ZSET per queue, written only by a reclaim
// that takes a lease that ran out, and read only by a settle that finds its
// lease gone, so that a settle sent again after its reply was lost can tell
// "an earlier settle of mine landed" (GONE) from "my lease was taken, and
// someone else may have settled the job since" (LEASE_LOST).
//
// docs/redis-keys.md describes the key ({q}:reclaimed).
package reclaims

import (
	_ "embed"

	"github.com/conveyorq/conveyor/internal/redischeck"
)

// Lib is the Lua text of remember_reclaimed and was_reclaimed (see
// lua/lib.lua). It needs internal/timers' Lib in front of it.
//
//go:embed lua/lib.lua
var Lib string

// Needs are the commands the scripts send on the record key, for a
// driver's Check.
func Needs(key string) []redischeck.Need {
	return []redischeck.Need{
		redischeck.Key(key, "ZADD", key, "0", "m"),
		redischeck.Key(key, "ZREMRANGEBYSCORE", key, "0", "0"),
		redischeck.Key(key, "ZREMRANGEBYRANK", key, "0", "0"),
		redischeck.Key(key, "ZCARD", key),
		redischeck.Key(key, "ZSCORE", key, "m"),
		redischeck.Key(key, "PEXPIRE", key, "1"),
	}
}
