package list

import (
	"fmt"
	"log/slog"
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
	// Prefix starts every key the driver writes, as
	// <Prefix>:{<queue>}:<part>. Defaults to "conveyor".
	Prefix string
	// MaxLen caps the messages one queue may hold, ready, delayed and in
	// flight together; an Enqueue that would pass it stores nothing and fails
	// with broker.ErrQueueFull. 0 means no cap. Defaults to 0.
	MaxLen int
	// DiscardMax caps the records kept in each queue's discard list; the
	// oldest are dropped past it and counted in <Prefix>:{<queue>}:dead_dropped.
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
	// ReapBatch bounds one step of recovery: how many expired leases one
	// script call moves. Defaults to 100. (Timers are promoted apart, by
	// package delay.)
	ReapBatch int
	// MaxRecoveries is how many lease expiries a message may have before it
	// is treated as poison: the reclaim that would give it MaxRecoveries
	// recoveries moves it to the discard list instead, with reason
	// "conveyor: poison: lease expired <n> times". A crash recovery is not a
	// handler failure and does not count as an attempt. Defaults to 3; a
	// negative value turns the cap off.
	MaxRecoveries int
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
	// Logger receives warnings (an eviction policy that can lose leases,
	// recovered messages, poison discards). Defaults to slog.Default(),
	// warnings and above only.
	Logger *slog.Logger
}

const defaultReapBatch = 100

// withDefaults validates cfg and returns a copy with defaults filled in.
func (cfg *Config) withDefaults() (Config, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Prefix == "" {
		c.Prefix = keys.DefaultPrefix
	}
	var errs *multierror.Error
	if err := keys.ValidatePrefix(c.Prefix); err != nil {
		errs = multierror.Append(errs, err)
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
	switch {
	case c.ReapBatch == 0:
		c.ReapBatch = defaultReapBatch
	case c.ReapBatch < 0:
		errs = multierror.Append(errs, fmt.Errorf("ReapBatch %d is negative", c.ReapBatch))
	}
	if c.MaxRecoveries == 0 {
		c.MaxRecoveries = broker.DefaultMaxRecoveries
	}
	if c.Logger == nil {
		c.Logger = logs.Default()
	}
	if err := errs.ErrorOrNil(); err != nil {
		return c, fmt.Errorf("list: config: %w", err)
	}
	return c, nil
}
