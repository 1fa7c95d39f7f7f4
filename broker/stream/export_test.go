package stream

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// ConsumerName returns the group member name of a consumer Open returned.
func ConsumerName(c broker.Consumer) string { return c.(*consumer).name }

// SetBlockHook makes c call f just before each blocking read. Set it before
// the first Fetch.
func SetBlockHook(c broker.Consumer, f func()) { c.(*consumer).blockHook = f }

// CompareIDs compares two stream entry IDs as Redis orders them.
func CompareIDs(a, b string) int { return compareIDs(a, b) }

// WithPrune sets, on cfg, the idle time past which a consumer with nothing
// pending is removed from its group, and the interval between sweeps (the
// first sweep of a consumer comes one interval after Open).
func WithPrune(cfg *Config, idle, every time.Duration) *Config {
	cfg.pruneIdle, cfg.pruneEvery = idle, every
	return cfg
}

// CancelStep runs one cancel.lua stretch of queue's state from cursor, as
// Driver.CancelJob does.
func CancelStep(ctx context.Context, d *Driver, queue, id string, state broker.JobState, cursor string) (bool, string, error) {
	return d.cancelStep(ctx, queue, id, state, cursor)
}

// Admit runs admission (admit.lua) over msgs, entries a plain XREADGROUP
// read for c, as Fetch does after such a read, and returns those to hand
// out.
func Admit(ctx context.Context, c broker.Consumer, msgs []redis.XMessage) ([]redis.XMessage, error) {
	return c.(*consumer).admit(ctx, msgs)
}
