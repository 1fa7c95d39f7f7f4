package pubsub

// The methods below are those of broker.WorkerRegistry, which the driver
// implements, declared here so that their documentation is where a user of
// the driver looks.

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// RegisterWorker stores w for ttl: SET ... PX ttl XX, which replaces a live
// entry; only when there was none (the pool's first beat, or one after its
// entry ran out) an SADD to the index and a SET, in one pipeline. It
// implements broker.WorkerRegistry.
func (d *Driver) RegisterWorker(ctx context.Context, w *broker.WorkerInfo, ttl time.Duration) error {
	return d.Registry.RegisterWorker(ctx, w, ttl)
}

// UnregisterWorker removes the entry of pool id and its name. It implements
// broker.WorkerRegistry.
func (d *Driver) UnregisterWorker(ctx context.Context, id string) error {
	return d.Registry.UnregisterWorker(ctx, id)
}

// Workers returns the live entries, sorted by ID: SSCAN pages of the index,
// one MGET per page, and per page with names whose entry ran out one short
// script that removes them. An entry that does not decode is skipped. It
// implements broker.WorkerRegistry.
func (d *Driver) Workers(ctx context.Context) ([]*broker.WorkerInfo, error) {
	return d.Registry.Workers(ctx)
}
