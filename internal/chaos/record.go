package main

import (
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// runRec is one handler run, as its worker reported it.
type runRec struct {
	inc, r   int // worker incarnation, run number in it
	id       string
	seq      int
	rec, att int       // the delivery's Recoveries and Attempt
	startNs  int64     // when it started, by the worker's clock (the machine's), unix ns
	endNs    int64     // when its handler returned, the same; 0 if it did not (see runEnd)
	start    time.Time // when the harness read its start
	done     bool      // the handler returned nil
	failed   bool      // the handler returned an error
	outcome  string    // the pool's settlement ("acked", ...); "" when none came
	finish   time.Time // when the harness read the outcome
}

// callRec is one Enqueue or EnqueueMany call of a producer.
type callRec struct {
	seqs       []int
	ids        []string // the IDs Enqueue returned, when it returned nil
	err        error
	start, end time.Time
	delay      time.Duration
}

// plan is what a job asks its handler to do, and the FIFO group it was
// enqueued in ("" for none).
type plan struct {
	fail    int
	discard bool
	group   string
}

// incRec is one worker process.
type incRec struct {
	killed   time.Time // when it was SIGKILLed; zero if it was not
	stopped  bool      // the harness asked it to stop
	exited   bool
	exitErr  error
	lastLogs []string
}

// fault is one disruption a scenario made: a worker kill, a Redis restart,
// a cut, a pause. Recovery is measured from its end.
type fault struct {
	kind string
	inc  int // the killed incarnation, for kills
	end  time.Time
}

// recorder collects what producers, workers and the scenario did.
type recorder struct {
	mu     sync.Mutex
	runs   map[[2]int]*runRec
	order  []*runRec
	calls  []*callRec
	plans  map[int]plan
	incs   map[int]*incRec
	faults []fault
	notify chan struct{} // closed and replaced on every event
}

func newRecorder() *recorder {
	return &recorder{runs: map[[2]int]*runRec{}, plans: map[int]plan{}, incs: map[int]*incRec{}, notify: make(chan struct{})}
}

// changed returns a channel closed at the next event.
func (r *recorder) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notify
}

// signal wakes waiters; r.mu is held.
func (r *recorder) signal() {
	close(r.notify)
	r.notify = make(chan struct{})
}

func (r *recorder) addCall(c *callRec) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) addPlan(seq int, p plan) {
	r.mu.Lock()
	r.plans[seq] = p
	r.mu.Unlock()
}

func (r *recorder) addFault(f fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

func (r *recorder) inc(n int) *incRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := r.incs[n]
	if i == nil {
		i = &incRec{}
		r.incs[n] = i
	}
	return i
}

func (r *recorder) start(run *runRec) {
	r.mu.Lock()
	r.runs[[2]int{run.inc, run.r}] = run
	r.order = append(r.order, run)
	r.signal()
	r.mu.Unlock()
}

// update applies f to run r of incarnation inc, if the harness knows it.
func (r *recorder) update(inc, n int, f func(*runRec)) {
	r.mu.Lock()
	if run := r.runs[[2]int{inc, n}]; run != nil {
		f(run)
	}
	r.signal()
	r.mu.Unlock()
}

// running counts the runs of live incarnations that have no outcome yet.
func (r *recorder) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, run := range r.order {
		if run.outcome == "" && r.incs[run.inc] != nil && r.incs[run.inc].killed.IsZero() && !r.incs[run.inc].exited {
			n++
		}
	}
	return n
}

// hasRun reports whether incarnation inc has started a run.
func (r *recorder) hasRun(inc int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.order {
		if run.inc == inc {
			return true
		}
	}
	return false
}

// runningIn counts the runs of incarnation inc without an outcome.
func (r *recorder) runningIn(inc int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, run := range r.order {
		if run.inc == inc && run.outcome == "" {
			n++
		}
	}
	return n
}

// unhandled counts the jobs of calls that returned nil and have not run to
// their end yet (an ack, or the discard they plan).
func (r *recorder) unhandled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	ended := map[int]bool{}
	for _, run := range r.order {
		if run.done || (run.outcome == "discarded" && r.plans[run.seq].discard) {
			ended[run.seq] = true
		}
	}
	n := 0
	for _, c := range r.calls {
		if c.err != nil {
			continue
		}
		for _, s := range c.seqs {
			if !ended[s] {
				n++
			}
		}
	}
	return n
}

// refusal reports whether err is Redis's or Conveyor's answer that the call
// stored nothing (an error reply, a duplicate, a full queue), rather than an
// outcome the caller cannot know (a connection lost, a timeout).
func refusal(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, broker.ErrDuplicate) || errors.Is(err, broker.ErrQueueFull) ||
		errors.Is(err, broker.ErrInvalidMessage) {
		return true
	}
	return !isConnErr(err)
}

// isConnErr reports whether err says the connection failed, so that the
// outcome of the command is unknown (as opposed to a reply from Redis).
func isConnErr(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false
	}
	return true
}
