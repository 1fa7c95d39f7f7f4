package stream

import (
	"context"
	"log/slog"
	"strconv"
	"time"
)

// A consumer of a crashed process never runs Close, so it would stay in its
// group forever and XINFO CONSUMERS would grow with every restart. A live
// consumer's fetch therefore sweeps its queue's group now and then
// (prune.lua): it removes the consumers holding no pending entry that have
// been idle longer than pruneIdle(vt), at most pruneMax per sweep. A live
// consumer that is not kept is never idle that long: each fetch round,
// blocking or not, resets its idle time, and a round runs at least every
// PollInterval. A kept one (broker.ConsumerOptions.Kept) sleeps on the wake
// signals without touching the group and may be; it holds nothing, so its
// removal costs nothing: its next XREADGROUP adds it back. One
// sweep per queue runs per pruneEvery across the fleet (the prune key
// elects it); a consumer first tries one pruneEvery after Open, then every
// pruneEvery.

const (
	// pruneEvery is the interval between sweeps of a queue's group.
	pruneEvery = 10 * time.Minute
	// pruneMinIdle is the least idle time before a consumer is removed.
	pruneMinIdle = time.Hour
	// pruneMax bounds the consumers one sweep removes.
	pruneMax = 100
)

// pruneIdleFor returns the idle time past which a consumer holding nothing is
// removed: 10 visibility timeouts, at least pruneMinIdle.
func (cfg *Config) pruneIdleFor(vt time.Duration) time.Duration {
	if cfg.pruneIdle > 0 {
		return cfg.pruneIdle
	}
	return max(10*vt, pruneMinIdle)
}

// pruneInterval returns the interval between sweeps.
func (cfg *Config) pruneInterval() time.Duration {
	if cfg.pruneEvery > 0 {
		return cfg.pruneEvery
	}
	return pruneEvery
}

// prune sweeps the queue's group when this consumer's turn has come; a
// failure is logged (pruning is housekeeping) and tried again one interval
// later.
func (c *consumer) prune(ctx context.Context) {
	now := time.Now()
	c.mu.Lock()
	due := !now.Before(c.nextPrune)
	if due {
		c.nextPrune = now.Add(c.d.cfg.pruneInterval())
	}
	c.mu.Unlock()
	if !due {
		return
	}
	idle := c.d.cfg.pruneIdleFor(c.vt).Milliseconds()
	every := c.d.cfg.pruneInterval().Milliseconds()
	v, err := pruneScript.Run(ctx, c.d.rdb, []string{c.keys.stream, c.keys.prune},
		c.d.cfg.Group, strconv.FormatInt(idle, 10), strconv.FormatInt(max(every, 1), 10), pruneMax)
	if err != nil {
		c.d.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "stream: could not remove idle consumers from the group",
			slog.String("queue", c.queue), slog.String("error", err.Error()))
		return
	}
	if n, _ := v.(int64); n > 0 {
		c.d.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "stream: removed idle consumers holding nothing from the group",
			slog.String("queue", c.queue), slog.Int64("count", n), slog.Duration("idle_over", time.Duration(idle)*time.Millisecond))
	}
}
