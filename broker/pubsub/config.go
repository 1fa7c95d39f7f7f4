package pubsub

import (
	"fmt"
	"log/slog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/logs"
)

// DefaultBuffer is how many received messages a consumer buffers when
// Config.Buffer is zero.
const DefaultBuffer = 1000

// Config configures a Driver. The zero value (and nil) is valid.
type Config struct {
	// Prefix starts every channel name: <prefix>:{<queue>}:ch. Publishers
	// and subscribers must agree on it. Defaults to "conveyor".
	Prefix string
	// Buffer is how many received messages each consumer holds for Fetch.
	// A consumer that falls further behind stalls its connection, and
	// go-redis drops messages it cannot hand over within a minute; Redis
	// itself disconnects a subscriber whose output buffer passes
	// client-output-buffer-limit (pubsub). Defaults to 1000.
	Buffer int
	// Sharded selects sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis 7.0+),
	// which keeps a channel's traffic on the node owning its hash slot
	// instead of broadcasting it to the whole cluster. Defaults to true
	// when the client is a *redis.ClusterClient, false otherwise.
	Sharded *bool
	// Logger receives warnings about undecodable messages and
	// resubscriptions. Defaults to slog.Default(), warnings and above only.
	Logger *slog.Logger
}

// resolved is a validated Config with its defaults filled in.
type resolved struct {
	prefix  string
	buffer  int
	sharded *bool
	logger  *slog.Logger
}

func (c *Config) resolve() (resolved, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	r := resolved{prefix: cfg.Prefix, buffer: cfg.Buffer, sharded: cfg.Sharded, logger: cfg.Logger}
	if r.prefix == "" {
		r.prefix = keys.DefaultPrefix
	}
	if err := keys.ValidatePrefix(r.prefix); err != nil {
		return r, fmt.Errorf("pubsub: config: %w", err)
	}
	switch {
	case r.buffer < 0:
		return r, fmt.Errorf("pubsub: config: Buffer %d is negative", r.buffer)
	case r.buffer == 0:
		r.buffer = DefaultBuffer
	}
	if r.logger == nil {
		r.logger = logs.Default()
	}
	return r, nil
}
