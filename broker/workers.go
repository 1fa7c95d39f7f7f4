package broker

import (
	"context"
	"time"
)

// WorkerInfo is what a running worker pool says about itself in the
// fleet's registry of workers (WorkerRegistry), renewed on every beat.
type WorkerInfo struct {
	// ID names the pool, unique across the fleet: host, process and a
	// random part.
	ID string `json:"id"`
	// Host and PID are the pool's machine (os.Hostname) and process.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Queues are the queues the pool serves; Concurrency is how many jobs
	// it runs at once.
	Queues      []string `json:"queues"`
	Concurrency int      `json:"concurrency"`
	// Running are the jobs the pool's handlers run, oldest first, at most
	// MaxRegisteredJobs of them; RunningTotal counts them all.
	Running      []RunningJob `json:"running"`
	RunningTotal int          `json:"running_total"`
	// StartedAt is when the pool started; SeenAt when it last beat, both by
	// the pool's clock.
	StartedAt time.Time `json:"started_at"`
	SeenAt    time.Time `json:"seen_at"`
	// Version is the Conveyor module version the pool runs ("(devel)" in
	// a build of Conveyor's own tree).
	Version string `json:"version"`
}

// RunningJob is one job a registered pool runs.
type RunningJob struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Queue     string    `json:"queue"`
	StartedAt time.Time `json:"started_at"`
}

// MaxRegisteredJobs caps WorkerInfo.Running, so that a registry entry
// stays small whatever a pool's concurrency.
const MaxRegisteredJobs = 1000

// WorkerRegistry is the fleet's registry of worker pools, in Redis; the
// list, stream and pubsub drivers implement it. Each pool registers itself
// when it starts, renews its entry every beat with a TTL, and removes it
// when it stops; the entry of a process that died goes when its TTL runs
// out.
type WorkerRegistry interface {
	// RegisterWorker stores w, replacing the pool's earlier entry, for
	// ttl.
	RegisterWorker(ctx context.Context, w *WorkerInfo, ttl time.Duration) error
	// UnregisterWorker removes the entry of pool id.
	UnregisterWorker(ctx context.Context, id string) error
	// Workers returns every live entry, sorted by ID. It reads the
	// registry in bounded pages.
	Workers(ctx context.Context) ([]*WorkerInfo, error)
}
