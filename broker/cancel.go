package broker

import (
	"context"
	"errors"
)

// ErrJobCanceled is the cause of a running job's context when the job was
// cancelled (Canceler.CancelJob), and the error an Extend reports for a
// delivery whose job was cancelled while it was in flight: the holder
// should stop the handler and end the job without a retry.
var ErrJobCanceled = errors.New("conveyor: job canceled")

// Canceler is the cancel side of a driver whose Capabilities has Cancel: a
// job is cancelled by ID in whatever state it is, from any process.
//
// A delayed job's timer and a ready job are removed. An in-flight job is
// marked: the mark is published to the processes that watch the queue
// (WatchCancels), every Extend of its delivery reports ErrJobCanceled
// (the lease is still extended: its holder is alive and ends the job), and
// a reclaim of its lease (its holder died) removes the job instead of
// handing it back. The holder ends the job with Ack. A mark names one
// delivery, so a later job under the same ID is not affected.
type Canceler interface {
	// CancelJob cancels the job id of queue and reports the state it was
	// in: JobDelayed, JobReady or JobInFlight; 0 when no job id is
	// delayed, ready or in flight (it finished, was discarded, or never
	// was). A job that moves between states as it is cancelled is looked
	// for again. Cancelling an in-flight job twice reports JobInFlight
	// both times. Finding a ready or in-flight job walks those states in
	// bounded steps, as Inspector.FindJob does.
	CancelJob(ctx context.Context, queue, id string) (JobState, error)
	// WatchCancels returns a channel that receives each job of queues
	// cancelled while in flight, as CancelJob marks it, until ctx ends (it
	// is then closed). Notices may be lost (a reconnection): Extend reports
	// every mark, so a holder learns of a cancel by its next heartbeat at
	// the latest.
	WatchCancels(ctx context.Context, queues ...string) (<-chan CanceledJob, error)
}

// CanceledJob names a job that was cancelled while in flight, and the
// delivery that was marked: a holder matches Delivery against its
// delivery's Receipt, so that another job under the same ID is not
// stopped.
type CanceledJob struct {
	Queue    string
	ID       string
	Delivery string // the marked delivery's Receipt
}
