package broker

import (
	"context"
	"time"
)

// A driver whose Capabilities has Records keeps a record of a finished job
// when the settle that ends its delivery asks for one: an Ack or a Discard
// of a Delivery whose Finish is set writes the record in the same atomic
// step that settles it, so a job is never settled without its record nor
// recorded without being settled. A delivery without Finish writes
// nothing, so a queue that never asks has no record keys at all.
//
// A queue's records are bounded by age and by count: each record expires
// Keep after it was written (the server's clock) and a queue keeps at most
// the driver's record cap (DefaultRecordMax unless configured); what
// either drops is counted (RecordStats). The record keys expire with their
// latest record, so a queue that stops asking leaves nothing behind.
//
// A record is keyed by job ID: a later job under the same ID (a business
// key reused) replaces the earlier one's record when it finishes.

// FinishRecord asks for a record of the job a Delivery carries, written by
// the settle that ends it (Ack or Discard).
type FinishRecord struct {
	// Record is what to keep. Its ID is the delivery's; FinishedAt and
	// ExpiresAt are set by the driver from the server's clock.
	Record JobRecord
	// Keep is how long the record is kept, from 1ms.
	Keep time.Duration
}

// JobRecord is what became of one finished job: its last delivery's
// outcome, when it ran and what it returned.
type JobRecord struct {
	// ID, Queue and Kind name the job.
	ID    string `json:"id"`
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// Outcome is how the job ended: "acked", "discarded" or "canceled".
	Outcome string `json:"outcome"`
	// Attempt numbers the handler run that ended the job, from 1.
	Attempt int `json:"attempt"`
	// Recoveries counts the lease expiries (crashed or stalled workers)
	// behind it.
	Recoveries int `json:"recoveries,omitempty"`
	// EnqueuedAt is when the job was enqueued, StartedAt when its last run
	// started (zero when it never started: cancelled while it waited in the
	// pool), FinishedAt when the settle was stored (the server's clock).
	EnqueuedAt time.Time `json:"enqueued_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// ExpiresAt is when retention drops the record.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Worker names the worker process that ran it last (broker.WorkerInfo's
	// ID).
	Worker string `json:"worker,omitempty"`
	// Error is the error that ended the job: a discard's reason, or
	// conveyor.ErrJobCanceled's text for a cancelled job; empty for an
	// acked one.
	Error string `json:"error,omitempty"`
	// Result is what the handler set with Job.SetResult, at most
	// MaxRecordResult bytes.
	Result []byte `json:"result,omitempty"`
}

// MaxRecordResult caps JobRecord.Result, and MaxRecordError JobRecord.Error
// (a longer error is cut, and says so).
const (
	MaxRecordResult = 16 << 10
	MaxRecordError  = 4 << 10
)

// DefaultRecordMax is the cap on the records of one queue of the Redis
// drivers (their Config.RecordMax).
const DefaultRecordMax = 100000

// Records reads the records of finished jobs of a driver whose
// Capabilities has Records. The driver's Inspector serves them too, as
// JobFinished.
type Records interface {
	// GetRecord returns the record of job id of queue, nil when there is
	// none (never asked for, or dropped by retention).
	GetRecord(ctx context.Context, queue, id string) (*JobRecord, error)
	// ListRecords returns up to limit records of queue (at most
	// MaxInspectPage) from position offset on, the latest to expire first
	// (for one retention: the newest first), and how many the queue holds.
	ListRecords(ctx context.Context, queue string, offset, limit int) ([]*JobRecord, int64, error)
	// RecordStats returns the figures of queue's records.
	RecordStats(ctx context.Context, queue string) (RecordStats, error)
}

// RecordStats are the figures of one queue's records of finished jobs.
type RecordStats struct {
	// Count is how many records the queue holds.
	Count int64
	// Expired counts the records dropped because their Keep ran out;
	// DroppedByCount those dropped because the queue held more than
	// MaxCount (the soonest to expire first). Both are kept while the queue
	// has records.
	Expired        int64
	DroppedByCount int64
	// MaxCount is the cap in force.
	MaxCount int
}
