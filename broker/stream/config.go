package stream

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/logs"
	"github.com/conveyorq/conveyor/internal/records"
)

// Config configures a Driver. The zero value (or nil) is valid.
type Config struct {
	// Prefix starts every key. Defaults to "conveyor".
	Prefix string
	// Group is the consumer group every consumer of every queue joins.
	// Defaults to "conveyor".
	Group string
	// Consumer names the consumers Open returns. Each consumer must have a
	// name of its own: two consumers of one queue sharing a name share their
	// leases. Set it only to give a single consumer a stable name. Defaults
	// to "<hostname>-<pid>-<random>", different for every Open.
	Consumer string
	// MaxLen caps the messages a queue holds (ready, in flight and delayed);
	// Enqueue fails with broker.ErrQueueFull past it. Defaults to 0:
	// unlimited.
	MaxLen int
	// DiscardMax caps the records kept in a queue's discard list; the oldest
	// are dropped past it and counted in <Prefix>:{<queue>}:dead_dropped.
	// Defaults to 10000.
	DiscardMax int
	// DiscardMaxAge drops the discard records older than it, oldest first,
	// counted in <Prefix>:{<queue>}:dead_expired: the scripts that discard
	// enforce it, and so do the calls that read the discard list
	// (broker.Discards). Defaults to 7 days; a negative value keeps records
	// whatever their age (DiscardMax still caps them).
	DiscardMaxAge time.Duration
	// RecordMax caps the records of finished jobs kept per queue
	// (broker.Records; written only for the jobs that ask for one): past
	// it, those soonest to expire are dropped and counted. Defaults to
	// 100,000.
	RecordMax int
	// MaxRecoveries is how many lease expiries a message may have before it
	// is treated as poison: the reclaim that would give it MaxRecoveries
	// recoveries moves it to the discard list instead, with reason
	// "conveyor: poison: lease expired <n> times". A crash recovery is not a
	// handler failure and does not count as an attempt. Defaults to 3; a
	// negative value turns the cap off.
	MaxRecoveries int
	// PollInterval is the longest an idle Fetch blocks before it looks again
	// for expired leases, and how often a busy consumer looks for them (due
	// timers wake it at once: a promoter appends them). An idle consumer
	// sends about two commands per PollInterval. A kept consumer
	// (broker.ConsumerOptions.Kept, a worker pool's) sleeps until woken, up
	// to a minute, and looks for expired leases itself only while under
	// load (woken after less than PollInterval asleep): the queue's keeper
	// wakes one when a lease expired. Defaults to 1s.
	PollInterval time.Duration
	// WaitReplicas makes Enqueue wait until this many replicas have the
	// jobs (Redis WAIT, on the connection that stored them) before it
	// returns nil, so that a failover to a replica keeps every job whose
	// Enqueue returned nil. Jobs not acknowledged in time are stored and
	// reported with a *broker.ReplicationError (do not enqueue them again).
	// It costs a replication round trip per call and one connection held
	// for it; settles do not wait (one lost in a failover runs its job
	// again, it loses nothing). Needs a *redis.Client (single or Sentinel)
	// or a *redis.ClusterClient. Defaults to 0: no wait.
	WaitReplicas int
	// WaitTimeout bounds each wait for replicas. Defaults to 1 s.
	WaitTimeout time.Duration
	// Logger receives warnings (entries deleted while pending, messages
	// discarded as poison, a risky maxmemory-policy) and errors of
	// background hand-backs. Defaults to slog.Default(), warnings and
	// above only.
	Logger *slog.Logger

	// pruneIdle and pruneEvery replace, when set (by tests), the idle time
	// past which a consumer with nothing pending is removed from its group
	// and the interval between sweeps (see prune.go).
	pruneIdle, pruneEvery time.Duration
}

const (
	defaultGroup        = "conveyor"
	defaultPollInterval = time.Second
)

// withDefaults returns a validated copy of cfg with defaults filled in.
func (cfg *Config) withDefaults() (Config, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Prefix == "" {
		c.Prefix = keys.DefaultPrefix
	}
	if c.Group == "" {
		c.Group = defaultGroup
	}
	if c.MaxRecoveries == 0 {
		c.MaxRecoveries = broker.DefaultMaxRecoveries
	}
	if c.PollInterval == 0 {
		c.PollInterval = defaultPollInterval
	}
	if c.Logger == nil {
		c.Logger = logs.Default()
	}
	var errs *multierror.Error
	if err := keys.ValidatePrefix(c.Prefix); err != nil {
		errs = multierror.Append(errs, err)
	}
	if err := broker.ValidateQueue(c.Group); err != nil {
		errs = multierror.Append(errs, fmt.Errorf("invalid group name %q", c.Group))
	}
	if c.Consumer != "" {
		if err := broker.ValidateQueue(c.Consumer); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("invalid consumer name %q", c.Consumer))
		}
	}
	if c.MaxLen < 0 {
		errs = multierror.Append(errs, fmt.Errorf("MaxLen %d is negative", c.MaxLen))
	}
	if r, err := discards.CheckRetention(c.DiscardMax, c.DiscardMaxAge); err != nil {
		errs = multierror.Append(errs, err)
	} else {
		c.DiscardMax, c.DiscardMaxAge = r.Max, r.MaxAge
	}
	if n, err := records.CheckMax(c.RecordMax); err != nil {
		errs = multierror.Append(errs, err)
	} else {
		c.RecordMax = n
	}
	if c.PollInterval < time.Millisecond {
		// XREADGROUP BLOCK 0 would block forever.
		errs = multierror.Append(errs, fmt.Errorf("PollInterval %v is under 1ms", c.PollInterval))
	}
	if err := errs.ErrorOrNil(); err != nil {
		return c, fmt.Errorf("stream: config: %w", err)
	}
	return c, nil
}

// consumerName returns the name of a new consumer.
func (cfg *Config) consumerName() string {
	if cfg.Consumer != "" {
		return cfg.Consumer
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	if broker.ValidateQueue(name) != nil {
		// A hostname with spaces or braces: keep the unique parts only.
		name = "c-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	}
	return name
}
