package broker

import (
	"context"
	"fmt"
	"time"
)

// Inspector is the read and repair side of a driver that keeps its queues
// in Redis (the list and stream drivers; not pubsub, which stores nothing).
// The CLI (docs/cli.md) is built on it, through conveyor.Inspector.
//
// Every per-queue read goes straight to the queue's keys (no KEYS, no
// SCAN). Pages are bounded: a limit above MaxInspectPage is refused.
// Lookups and purges that must walk a structure do so in bounded steps,
// one script call each, so the server never pauses long; what each call
// costs is in docs/inspector.md.
type Inspector interface {
	// Queues returns the queues known under the driver's prefix, sorted: every
	// queue a process enqueued to or opened a consumer on (the registry
	// <prefix>:queues). A queue stays known when it empties.
	Queues(ctx context.Context) ([]string, error)
	// QueueSizes returns the sizes and counters of each queue, in the order
	// given, in one round trip (one script call per queue, pipelined), each
	// queue read atomically.
	QueueSizes(ctx context.Context, queues ...string) ([]QueueSizes, error)
	// ListJobs returns up to limit jobs of queue in state from position
	// offset on, and how many the state holds. The order is the state's own
	// (JobState says which); limit is 1 to MaxInspectPage.
	ListJobs(ctx context.Context, queue string, state JobState, offset, limit int) ([]*JobInfo, int64, error)
	// FindJob returns the job id of queue if it is in state, nil (and no
	// error) when it is not. With several (a caller-chosen ID enqueued
	// twice) it returns the first in the state's order.
	FindJob(ctx context.Context, queue string, state JobState, id string) (*JobInfo, error)
	// PurgeReady deletes up to max ready jobs of queue (0: all it holds when
	// the call starts), those due to run next first, and reports how many
	// it deleted. In-flight jobs cannot be purged: they are under a lease.
	PurgeReady(ctx context.Context, queue string, max int) (int, error)
	// PurgeDelayed deletes up to max pending timers of queue (0: all it
	// holds when the call starts), earliest due first, and reports how many
	// it deleted.
	PurgeDelayed(ctx context.Context, queue string, max int) (int, error)
}

// MaxInspectPage caps the jobs one Inspector.ListJobs call returns.
const MaxInspectPage = 1000

// JobState is where a job of a queue is.
type JobState int

// The states of a job. The order of ListJobs differs by state: ready jobs
// come next-to-run first, in-flight jobs earliest lease deadline first
// (list driver) or oldest delivery first (stream driver: by entry ID),
// delayed jobs earliest due first, discarded jobs newest first, finished
// jobs latest to expire first (Records.ListRecords).
const (
	JobReady     JobState = iota + 1 // waiting to be fetched
	JobInFlight                      // fetched, under a lease
	JobDelayed                       // a timer: ready at its RunAt
	JobDiscarded                     // a record in the discard queue
	JobFinished                      // a record of a finished job (Records)
)

var stateNames = [...]string{JobReady: "ready", JobInFlight: "in_flight", JobDelayed: "delayed", JobDiscarded: "discarded", JobFinished: "finished"}

// String returns "ready", "in_flight", "delayed", "discarded" or
// "finished".
func (s JobState) String() string {
	if s.Valid() {
		return stateNames[s]
	}
	return fmt.Sprintf("JobState(%d)", int(s))
}

// Valid reports whether s is one of the five states.
func (s JobState) Valid() bool { return s >= JobReady && s <= JobFinished }

// ParseJobState returns the state String names (for a CLI's or an HTTP
// API's arguments).
func ParseJobState(name string) (JobState, error) {
	for s := JobReady; s <= JobFinished; s++ {
		if stateNames[s] == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("conveyor: unknown job state %q: want ready, in_flight, delayed, discarded or finished", name)
}

// QueueSizes are the figures of one queue, read together.
type QueueSizes struct {
	// Queue names the queue.
	Queue string
	// Ready counts the jobs waiting to be fetched.
	Ready int64
	// InFlight counts the jobs fetched and not settled yet.
	InFlight int64
	// Delayed counts the pending timers (delayed jobs and retries).
	Delayed int64
	// Discarded counts the discard records (Discards.Count).
	Discarded int64
	// Grouped counts the jobs waiting in their FIFO groups' lines
	// (Message.Group): not in the queue yet, each let in when a job of its
	// group ends.
	Grouped int64
	// Limited counts the jobs waiting for a slot of a concurrency limit
	// (Limiter): fetched once, not delivered, each let in when a slot of
	// its limit comes back.
	Limited int64
	// Processed counts the jobs acked since the queue's counters began:
	// cumulative, never reset. Rates come from sampling it twice.
	Processed int64
	// Failed counts the handler runs that ended in a retry or a discard
	// (Consumer.Retry and Consumer.Discard), cumulative. Postponed and
	// released jobs and crash recoveries are not failures.
	Failed int64
	// Discards are the figures of the queue's discard queue.
	Discards DiscardStats
}

// JobInfo is one job as an Inspector found it.
type JobInfo struct {
	// Message is the job as stored (Queue set). For a delayed job RunAt is
	// when it is due. Recoveries includes the lease expiries of the
	// current delivery where the driver counts them apart (stream).
	Message
	// State is where the job is.
	State JobState
	// LeaseDeadline is when the lease of an in-flight job runs out, where
	// the driver stores one (list); zero otherwise.
	LeaseDeadline time.Time
	// LeasedAt is when an in-flight job's lease began, where the driver
	// keeps a lease as a start rather than a deadline (stream: the server's
	// time less the entry's idle time); zero otherwise. The lease runs out
	// one visibility timeout after it. It is the delivery's time unless an
	// extension moved it (Consumer.Extend sets the idle time).
	LeasedAt time.Time
	// Consumer names the consumer holding an in-flight job, where the driver
	// knows it (stream); empty otherwise.
	Consumer string
	// Reason and DiscardedAt say why and when a discarded job was discarded.
	Reason      string
	DiscardedAt time.Time
	// Record is a finished job's record (State JobFinished); Message then
	// holds the ID, kind, queue, attempt, recoveries and EnqueuedAt it
	// names.
	Record *JobRecord
	// Raw holds the stored form when it cannot be decoded (Message then
	// holds what could be read, the ID at least when the header is intact);
	// nil otherwise.
	Raw []byte
}
