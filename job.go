package conveyor

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// Job is what a handler sees: the message, and settle methods bound to the
// delivery that brought it. Settle methods are fenced: once the job's lease
// is lost (it expired and the job was delivered again), they fail with
// ErrLeaseLost and change nothing.
type Job struct {
	broker.Message

	delivery *broker.Delivery
	settler  Settler
	state    atomic.Int32
	acked    atomic.Bool
	fin      finishing
	result   atomic.Pointer[[]byte]
}

const (
	unsettled int32 = iota
	settling
	settled
)

// Settler carries out a Job's settle calls. It is runner plumbing (see "For
// runners" in the package doc): the worker pool provides one (batching
// acks, tracking leases); handlers never implement it.
type Settler interface {
	Ack(ctx context.Context, d *broker.Delivery) error
	Retry(ctx context.Context, d *broker.Delivery, at time.Time) error
	Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error
	Discard(ctx context.Context, d *broker.Delivery, reason string) error
	Extend(ctx context.Context, d *broker.Delivery, ttl time.Duration) error
}

// NewJob binds a delivery to the settler that settles it. It is runner
// plumbing (see "For runners" in the package doc); a unit test of a handler
// function may call NewJob(delivery, nil): a Job whose settle calls fail
// with an error, for a handler that only returns.
func NewJob(d *broker.Delivery, s Settler) *Job {
	if s == nil {
		s = noSettler{}
	}
	return &Job{Message: d.Message, delivery: d, settler: s}
}

// errNoSettler is what the settle calls of a Job made with a nil Settler
// return.
var errNoSettler = errors.New("conveyor: the job has no settler (NewJob with a nil Settler)")

// noSettler is the Settler of a Job made with a nil one: every call fails.
type noSettler struct{}

func (noSettler) Ack(context.Context, *broker.Delivery) error                   { return errNoSettler }
func (noSettler) Retry(context.Context, *broker.Delivery, time.Time) error      { return errNoSettler }
func (noSettler) Postpone(context.Context, *broker.Delivery, time.Time) error   { return errNoSettler }
func (noSettler) Discard(context.Context, *broker.Delivery, string) error       { return errNoSettler }
func (noSettler) Extend(context.Context, *broker.Delivery, time.Duration) error { return errNoSettler }

// ConsumerGroup names the consumer group whose lease the job runs under,
// for drivers with groups (the stream driver); empty otherwise.
func (j *Job) ConsumerGroup() string { return j.delivery.ConsumerGroup }

// Settled reports whether the job was acked, retried or discarded.
func (j *Job) Settled() bool { return j.state.Load() == settled }

// Ack settles the job as done.
func (j *Job) Ack(ctx context.Context) error {
	return j.settle(func() error {
		err := j.settler.Ack(ctx, j.delivery)
		if err == nil {
			j.acked.Store(true)
		}
		return err
	}, Settlement{Outcome: OutcomeAcked})
}

// Acked reports whether the job was settled with Ack (rather than handed
// back or discarded), so that middleware can tell "done" from "not done".
func (j *Job) Acked() bool { return j.acked.Load() }

// Retry hands the job back to run again at at and counts a failed attempt.
// The worker slot is free at once; nothing sleeps in process.
func (j *Job) Retry(ctx context.Context, at time.Time) error {
	return j.settle(func() error { return j.settler.Retry(ctx, j.delivery, at) }, Settlement{Outcome: OutcomeRetried, At: at})
}

// Postpone hands the job back to run again at at without counting a failed
// attempt: for a job that could not start (a rate limit, a dependency not
// ready), not one that failed. The worker slot is free at once.
func (j *Job) Postpone(ctx context.Context, at time.Time) error {
	return j.settle(func() error { return j.settler.Postpone(ctx, j.delivery, at) }, Settlement{Outcome: OutcomePostponed, At: at})
}

// Nack hands the job back to run again as soon as possible, counting a failed
// attempt.
func (j *Job) Nack(ctx context.Context) error { return j.Retry(ctx, time.Time{}) }

// Discard moves the job to its queue's discard queue with reason.
func (j *Job) Discard(ctx context.Context, reason string) error {
	return j.settle(func() error { return j.settler.Discard(ctx, j.delivery, reason) }, Settlement{Outcome: OutcomeDiscarded, Reason: reason})
}

// Extend says the job is still being worked on: its lease runs until now+d.
// The pool already extends the leases of running jobs; call Extend for a
// longer lease than the visibility timeout.
func (j *Job) Extend(ctx context.Context, d time.Duration) error {
	if j.state.Load() != unsettled {
		return ErrAlreadySettled
	}
	return j.settler.Extend(ctx, j.delivery, d)
}

// settle runs one settle call at most once and records it as s. A call
// that failed for another reason than a lost lease (Redis unreachable, say)
// leaves the job unsettled so that it can be tried again; its lease still
// protects it meanwhile.
func (j *Job) settle(f func() error, s Settlement) error {
	if !j.state.CompareAndSwap(unsettled, settling) {
		return ErrAlreadySettled
	}
	err := f()
	if err != nil && !isLeaseLost(err) {
		j.state.Store(unsettled)
		return err
	}
	if err != nil {
		s = Settlement{Outcome: OutcomeLeaseLost, Err: err}
	}
	if s.At.IsZero() && (s.Outcome == OutcomeRetried || s.Outcome == OutcomePostponed) {
		s.At = time.Now()
	}
	j.record(s)
	j.state.Store(settled)
	return err
}

func isLeaseLost(err error) bool { return errors.Is(err, ErrLeaseLost) }

// SetResult sets what the job's record (EnqueueOptions.Record,
// worker.Config.Records) keeps as its result: a small value for support
// and callers to look up (an invoice number, a count), at most
// MaxRecordResult bytes. A later call replaces it; it is kept only when
// the job finishes with a record, and costs nothing otherwise.
func (j *Job) SetResult(b []byte) error {
	if len(b) > MaxRecordResult {
		return fmt.Errorf("conveyor: job %q: result of %d bytes, more than %d", j.ID, len(b), MaxRecordResult)
	}
	c := append([]byte(nil), b...)
	j.result.Store(&c)
	return nil
}

// Result returns what SetResult set, nil when nothing.
func (j *Job) Result() []byte {
	if p := j.result.Load(); p != nil {
		return *p
	}
	return nil
}

// MaxRecordResult caps Job.SetResult.
const MaxRecordResult = broker.MaxRecordResult
