package conveyor

import (
	"sync"
	"time"
)

// Outcome says how one delivery of a job ended.
type Outcome int

// The outcomes of a delivery.
const (
	// OutcomeAcked: the job is done and removed from Redis.
	OutcomeAcked Outcome = iota + 1
	// OutcomeRetried: the job failed and runs again at Settlement.At as its
	// next attempt.
	OutcomeRetried
	// OutcomePostponed: the job could not start and runs again at
	// Settlement.At, no attempt counted (a rate limit, say).
	OutcomePostponed
	// OutcomeDiscarded: the job is in its queue's discard queue with
	// Settlement.Reason.
	OutcomeDiscarded
	// OutcomeReleased: the pool handed the job back unchanged (it stopped
	// and the shutdown grace ran out); it runs again at once.
	OutcomeReleased
	// OutcomeLeaseLost: the job's lease ran out (its worker stalled) and it
	// was delivered again elsewhere; this delivery's settle changed nothing.
	OutcomeLeaseLost
	// OutcomeUnsettled: settling failed (Settlement.Err, Redis out of reach
	// say); the job's lease brings it back when it runs out.
	OutcomeUnsettled
	// OutcomeCanceled: the job was cancelled while it ran or waited to
	// start (Client.CancelJob) and its handler did not finish it: it is
	// removed from Redis as an ack removes it, and not retried.
	OutcomeCanceled
)

var outcomeNames = [...]string{"", "acked", "retried", "postponed", "discarded", "released", "lease_lost", "unsettled", "canceled"}

// String returns the outcome's name ("acked", "retried", "postponed",
// "discarded", "released", "lease_lost", "unsettled", "canceled"), as the span
// attribute conveyor.job.outcome of contrib/otelconveyor carries it.
func (o Outcome) String() string {
	if o <= 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// Settlement is what became of one delivery of a job.
type Settlement struct {
	Outcome Outcome
	// At is when a retried or postponed job runs again.
	At time.Time
	// Reason is the discard reason of a discarded job.
	Reason string
	// Err is why settling failed (OutcomeUnsettled, OutcomeLeaseLost).
	Err error
}

// finishing holds a job's finish observers and whether it finished.
type finishing struct {
	mu        sync.Mutex
	observers []func(Settlement)
	done      bool
	last      Settlement
}

// OnFinish registers f to be called once, when the runner (the worker pool)
// is done with this delivery of the job: after its ack, retry, discard or
// hand-back is stored, or failed. Observers run in registration order, on
// the runner's goroutine, after the handler chain returned; they must be
// quick and must not settle the job. Tracing and metrics middleware use it
// to see outcomes the pool decides after the chain returns. An observer
// registered after the job finished is called at once.
func (j *Job) OnFinish(f func(Settlement)) {
	j.fin.mu.Lock()
	if !j.fin.done {
		j.fin.observers = append(j.fin.observers, f)
		j.fin.mu.Unlock()
		return
	}
	s := j.fin.last
	j.fin.mu.Unlock()
	f(s)
}

// Settlement returns how the job was settled through its own settle
// methods (Ack, Retry, Postpone, Discard) so far; the zero Settlement when
// it was not. Settles the pool makes on its own (batched acks, hand-backs)
// reach OnFinish observers only.
func (j *Job) Settlement() Settlement {
	j.fin.mu.Lock()
	defer j.fin.mu.Unlock()
	return j.fin.last
}

// FinishJob tells the OnFinish observers of job how its delivery ended. It
// is runner plumbing (see "For runners" in the package doc): a runner calls
// it once per delivery, when it is done with the job (the worker pool
// does); later calls do nothing.
func FinishJob(job *Job, s Settlement) {
	job.fin.mu.Lock()
	if job.fin.done {
		job.fin.mu.Unlock()
		return
	}
	job.fin.done = true
	job.fin.last = s
	obs := job.fin.observers
	job.fin.observers = nil
	job.fin.mu.Unlock()
	for _, f := range obs {
		f(s)
	}
}

// record notes a settle made through the job's own methods.
func (j *Job) record(s Settlement) {
	j.fin.mu.Lock()
	if !j.fin.done {
		j.fin.last = s
	}
	j.fin.mu.Unlock()
}
