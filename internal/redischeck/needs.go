package redischeck

import (
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/history"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/limits"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Durable returns what the list and stream drivers both send, on the keys
// and channels of ProbeQueue under prefix: the scripts themselves (EVALSHA,
// EVAL on NOSCRIPT), the server's clock (TIME, in every script that
// decides by time), the commands of internal/timers' scripts (timers,
// unique keys, cron records and the index of cron series, the promoters'
// wake-up channel),
// internal/discards' (the discard list and its counters) and
// internal/inspect's (the stats counters), internal/groups' (FIFO
// groups), internal/limits' (concurrency limits), internal/history's (the
// keeper's samples of the queue), and the queue registry. Each
// driver adds the commands of its ready structure.
func Durable(prefix string) []Need {
	q := keys.Queue(prefix, ProbeQueue)
	t := timers.QueueKeys(prefix, ProbeQueue)
	d := discards.QueueKeys(prefix, ProbeQueue)
	g := groups.QueueKeys(prefix, ProbeQueue)
	l := limits.QueueKeys(prefix, ProbeQueue)
	stats, reg, unique := q.Part("stats"), registry.Key(prefix), t.Unique("u")
	hist := history.Key(prefix, ProbeQueue)
	return []Need{
		Key(g.Jobs, "HMGET", g.Jobs, "f"),
		Key(g.Jobs, "HSET", g.Jobs, "f", "v"),
		Key(g.Jobs, "HEXISTS", g.Jobs, "f"),
		Key(g.Jobs, "HDEL", g.Jobs, "f"),
		Key(g.Jobs, "EXISTS", g.Jobs),
		Key(g.State, "HGET", g.State, "f"),
		Key(g.State, "HMGET", g.State, "f"),
		Key(g.State, "HSET", g.State, "f", "v"),
		Key(g.State, "HDEL", g.State, "f"),
		Key(g.Wait, "ZRANGEBYLEX", g.Wait, "-", "+"),
		Key(g.Wait, "ZREVRANGEBYLEX", g.Wait, "+", "-"),
		Key(g.Wait, "ZREMRANGEBYLEX", g.Wait, "-", "+"),
		Key(g.Msgs, "HMGET", g.Msgs, "f"),
		Key(g.Msgs, "HLEN", g.Msgs),
		Key(g.Msgs, "HSET", g.Msgs, "f", "v"),
		Key(g.Msgs, "HDEL", g.Msgs, "f"),
		Key(hist, "XADD", hist, "MINID", "0", "*", "r", "0"),
		Key(hist, "XREVRANGE", hist, "+", "-", "COUNT", "1"),
		Key(hist, "PEXPIRE", hist, "1000"),
		Key(l.Max, "HGETALL", l.Max),
		Key(l.Max, "HSET", l.Max, "f", "1"),
		Key(l.Max, "HDEL", l.Max, "f"),
		Key(l.State, "HMGET", l.State, "f"),
		Key(l.State, "HSET", l.State, "f", "v"),
		Key(l.Of, "EXISTS", l.Of),
		Key(l.Of, "HMGET", l.Of, "f"),
		Key(l.Wait, "ZLEXCOUNT", l.Wait, "-", "+"),
		Key(l.Wait, "ZRANGEBYLEX", l.Wait, "-", "+"),
		Command("PING"),
		Command("TIME"),
		Key(q.Part("ready"), "EVALSHA", "0", "1", q.Part("ready")),
		Key(q.Part("ready"), "EVAL", "return 0", "1", q.Part("ready")),
		Channel(t.Channel, "PUBLISH", "0"),
		Channel(t.Channel, "SUBSCRIBE"),
		Key(t.Delayed, "ZADD", t.Delayed, "0", "m"),
		Key(t.Delayed, "ZREM", t.Delayed, "m"),
		Key(t.Delayed, "ZSCORE", t.Delayed, "m"),
		Key(t.Delayed, "ZRANGE", t.Delayed, "0", "0"),
		Key(t.Delayed, "ZRANGEBYSCORE", t.Delayed, "0", "0"),
		Key(t.Delayed, "ZCARD", t.Delayed),
		Key(t.Timers, "HSET", t.Timers, "f", "v"),
		Key(t.Timers, "HGET", t.Timers, "f"),
		Key(t.Timers, "HMGET", t.Timers, "f"),
		Key(t.Timers, "HDEL", t.Timers, "f"),
		Key(unique, "SET", unique, "v"),
		Key(unique, "GET", unique),
		Key(t.CronSeries, "ZADD", t.CronSeries, "0", "m"),
		Key(t.CronSeries, "ZREMRANGEBYSCORE", t.CronSeries, "-inf", "0"),
		Key(t.CronSeries, "ZRANGE", t.CronSeries, "0", "0"),
		Key(t.CronSeries, "PEXPIRE", t.CronSeries, "1000"),
		Key(stats, "HINCRBY", stats, "processed", "1"),
		Key(d.Dead, "LPUSH", d.Dead, "m"),
		Key(d.Dead, "RPOP", d.Dead),
		Key(d.Dead, "LLEN", d.Dead),
		Key(d.Dead, "LINDEX", d.Dead, "0"),
		Key(d.Dead, "LRANGE", d.Dead, "0", "0"),
		Key(d.Dead, "LPOS", d.Dead, "m"),
		Key(d.Dead, "LSET", d.Dead, "0", "m"),
		Key(d.Dead, "LREM", d.Dead, "0", "m"),
		Key(d.Dead, "LTRIM", d.Dead, "0", "0"),
		Key(d.Dropped, "INCRBY", d.Dropped, "1"),
		Key(reg, "SADD", reg, "q"),
		Key(reg, "SSCAN", reg, "0"),
	}
}
