package broker

import (
	"context"
	"errors"
	"fmt"
)

// QueueDeleter deletes queues: every key a queue has and its name in the
// queue registry. The list and stream drivers implement it, and
// conveyor.Inspector.DeleteQueue is built on it; a driver that stores
// nothing (pubsub) does not.
//
// A delete is meant for a queue no process uses any more. A consumer still
// open on the queue goes on working: it finds the queue empty, and a job
// enqueued after the delete makes the queue anew (keys, and its registry
// entry once a process that did not know the queue yet, or the driver that
// deleted it, enqueues to it or opens it). Jobs it held in flight when a
// forced delete took them are gone: their settles and lease extensions
// fail with ErrLeaseLost, as after a lost lease.
type QueueDeleter interface {
	// DeleteQueue deletes queue: its ready, in-flight, delayed and
	// discarded jobs, its counters, its pause, its unique keys, cron
	// records and keeper election, then its name in the registry, and
	// reports what it deleted. Unless force, it refuses while jobs of queue
	// are in flight (leased to consumers), with an *InFlightError, deleting
	// nothing. Deleting a queue that has no keys is no error: it deletes
	// nothing and says so.
	DeleteQueue(ctx context.Context, queue string, force bool) (QueueDeletion, error)
}

// QueueDeletion reports what a DeleteQueue deleted.
type QueueDeletion struct {
	// Queue names the queue.
	Queue string
	// Ready, InFlight, Delayed and Discarded count the jobs deleted in
	// each state (discard records for Discarded), as the queue held them
	// when the delete took them, all at once.
	Ready, InFlight, Delayed, Discarded int64
	// Keys counts the Redis keys deleted, of every kind (a driver that
	// keeps queues elsewhere counts what it kept in Redis).
	Keys int64
	// Registered reports whether the registry listed the queue: the delete
	// removed it from there.
	Registered bool
}

// Jobs returns how many jobs d deleted, in every state.
func (d QueueDeletion) Jobs() int64 { return d.Ready + d.InFlight + d.Delayed + d.Discarded }

// ErrJobsInFlight is wrapped by every *InFlightError.
var ErrJobsInFlight = errors.New("conveyor: queue has jobs in flight")

// InFlightError reports a DeleteQueue refused, deleting nothing, because
// jobs of the queue are in flight: workers hold them under leases.
type InFlightError struct {
	Queue string
	// InFlight is how many jobs were in flight when the delete looked.
	InFlight int64
}

func (e *InFlightError) Error() string {
	return fmt.Sprintf("conveyor: queue %q has %d jobs in flight, leased to workers: nothing deleted; "+
		"stop its workers or wait for the jobs to settle, or force the delete", e.Queue, e.InFlight)
}

func (e *InFlightError) Unwrap() error { return ErrJobsInFlight }
