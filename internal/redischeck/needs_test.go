package redischeck_test

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/timers"
)

// TestDurableAsksForTheCronIndex: Check asks the ACL for what fire.lua
// (ZADD, ZREMRANGEBYSCORE, ZRANGE, PEXPIRE) and CronSeries (ZRANGE) send on
// a queue's index of cron series, on that key, so that an ACL whose key
// patterns leave it out fails Check rather than every stored fire.
func TestDurableAsksForTheCronIndex(t *testing.T) {
	t.Parallel()
	index := timers.QueueKeys("p", redischeck.ProbeQueue).CronSeries
	asked := map[string]bool{}
	for _, n := range redischeck.Durable("p") {
		if n.Obj == index && !n.Channel {
			asked[n.Cmd] = true
		}
	}
	for _, cmd := range []string{"ZADD", "ZREMRANGEBYSCORE", "ZRANGE", "PEXPIRE"} {
		if !asked[cmd] {
			t.Errorf("Durable does not ask for %s on %s", cmd, index)
		}
	}
}
