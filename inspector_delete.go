package conveyor

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/broker"
)

// DeleteQueueOptions configure Inspector.DeleteQueue. A nil
// *DeleteQueueOptions is the zero value.
type DeleteQueueOptions struct {
	// Force deletes the queue even while jobs of it are in flight: their
	// workers' settles and lease extensions then fail with ErrLeaseLost
	// (a pool cancels such a handler's context at its next heartbeat), and
	// the jobs are gone. Defaults to false: the delete refuses with an
	// *InFlightError, deleting nothing.
	Force bool
}

// QueueDeletion reports what Inspector.DeleteQueue deleted: the jobs of
// each state, the Redis keys, and whether the registry listed the queue
// (broker.QueueDeletion).
type QueueDeletion = broker.QueueDeletion

// InFlightError reports a DeleteQueue refused, deleting nothing, because
// jobs of the queue are in flight (broker.InFlightError). It wraps
// ErrJobsInFlight.
type InFlightError = broker.InFlightError

// ErrJobsInFlight is wrapped by every *InFlightError.
var ErrJobsInFlight = broker.ErrJobsInFlight

// DeleteQueue deletes queue and every key it has: its ready, in-flight,
// delayed and discarded jobs, its processed and failed counters, its pause,
// its unique keys, its cron series' records and its keeper election, then
// its name in the registry (Queues no longer lists it). It reports how many
// jobs of each state it deleted and how many keys.
//
// While jobs of the queue are in flight (leased to workers) it refuses
// with an *InFlightError (errors.Is ErrJobsInFlight) and deletes nothing,
// unless opts.Force. The refusal and the delete of the jobs are one atomic
// script, so a job cannot slip into flight between them.
//
// Delete a queue no process uses any more. A pool still running on it
// goes on: it finds the queue empty and idles as on any empty queue; a job
// enqueued after the delete makes the queue anew, and it is listed again
// once a process that did not know it yet (or this Inspector's driver)
// enqueues to it or opens it (each driver registers a queue once). A key a
// process makes while the delete runs may outlive it.
//
// Deleting a queue that has no keys is no error: it deletes what there is
// (a registry entry, nothing at all) and reports it. On an error it
// reports what it had deleted; running it again finishes the delete. Its
// cost (docs/inspector.md): one script call that frees the queue's jobs
// (O(jobs)), a SCAN of the database for the keys whose names hold data
// (one round trip per 1,000 keys in the database, or in the Cluster node
// of the queue's slot), and an SREM.
func (i *Inspector) DeleteQueue(ctx context.Context, queue string, opts *DeleteQueueOptions) (*QueueDeletion, error) {
	if err := checkQueue("delete queue", queue); err != nil {
		return nil, err
	}
	x, ok := i.d.(broker.QueueDeleter)
	if !ok {
		return nil, fmt.Errorf("conveyor: inspector: delete queue: driver %T cannot delete queues: %w", i.d, broker.ErrUnsupported)
	}
	var o DeleteQueueOptions
	if opts != nil {
		o = *opts
	}
	res, err := x.DeleteQueue(ctx, queue, o.Force)
	res.Queue = queue
	if err != nil {
		return &res, fmt.Errorf("conveyor: inspector: delete queue %q: %w", queue, err)
	}
	return &res, nil
}
