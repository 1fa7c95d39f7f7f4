package conveyortest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/groups"
	jobrecords "github.com/conveyorq/conveyor/internal/records"
)

// Config configures a Driver. The zero value is valid.
type Config struct {
	// Clock is the clock the driver judges due times and leases by.
	// Defaults to the system clock; give it a NewClock to move time by
	// hand.
	Clock *Clock
	// DiscardMax caps the records of each queue's discard queue; the
	// oldest go first. Defaults to broker.DefaultDiscardMax.
	DiscardMax int
	// DiscardMaxAge is how long a discard record is kept. Defaults to
	// broker.DefaultDiscardMaxAge.
	DiscardMaxAge time.Duration
	// RecordMax caps the records of finished jobs kept per queue
	// (broker.Records; written only for the deliveries that ask for one):
	// past it, those soonest to expire are dropped and counted. Defaults to
	// broker.DefaultRecordMax.
	RecordMax int
}

// Driver is a broker.Driver that keeps its queues in memory, for tests
// that need no Redis. It has the list driver's capabilities but Pause and
// Keep (at-least-once with leases and fencing, FIFO, delayed jobs and
// timers, Extend, a discard queue, records of finished jobs, FIFO groups,
// cancelling jobs by ID, concurrency limits per queue and per kind) and
// passes the conformance suite of broker/brokertest. It implements
// broker.Timers, broker.Discards, broker.Records, broker.Inspector,
// broker.QueueDeleter, broker.Canceler and broker.Limiter, so a
// worker.Pool, a conveyor.Client, a conveyor.Inspector, package delay's
// promoters and cron run on it as they do on Redis. Retention of discard
// records and of records of finished jobs goes by its clock.
//
// What it does not do: keep anything after the process ends, share queues
// between processes (a limit holds the jobs of this driver only), elect
// keepers, pause queues or register workers.
type Driver struct {
	clock  *Clock
	recs   records
	maxRec int
	maxAge time.Duration
	// recordMax caps each queue's records of finished jobs.
	recordMax int

	mu       sync.Mutex
	queues   map[string]*queue // every queue enqueued to or opened: the registry
	tokens   int64
	receipts int64
	// deleted holds the emptied state of the queues DeleteQueue deleted,
	// taken back by the next use of the queue, so that the fetches and
	// timer watchers waiting on it go on.
	deleted map[string]*queue
	// done holds the records of finished jobs of each queue that has any
	// (records.go); apart from queues, as a read of records registers no
	// queue.
	done map[string]*finished
	// limits holds the concurrency limits of each queue that has any
	// (limits.go), shared with the queue's state; apart from queues, as
	// setting a limit registers no queue.
	limits map[string]map[string]*limit
	// cancelWatches holds each WatchCancels channel and the queues it
	// watches (cancel.go).
	cancelWatches map[chan broker.CanceledJob]map[string]bool
}

var (
	_ broker.Driver       = (*Driver)(nil)
	_ broker.Timers       = (*Driver)(nil)
	_ broker.Discards     = (*Driver)(nil)
	_ broker.Records      = (*Driver)(nil)
	_ broker.Inspector    = (*Driver)(nil)
	_ broker.QueueDeleter = (*Driver)(nil)
	_ broker.Canceler     = (*Driver)(nil)
	_ broker.Limiter      = (*Driver)(nil)
)

// New returns an empty in-memory driver.
func New(cfg *Config) (*Driver, error) {
	return newDriver(cfg, newMemRecords())
}

// newDriver returns a driver that keeps its discard records in recs.
func newDriver(cfg *Config, recs records) (*Driver, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.DiscardMax < 0 || cfg.DiscardMaxAge < 0 {
		return nil, fmt.Errorf("conveyortest: DiscardMax %d, DiscardMaxAge %v: must not be negative", cfg.DiscardMax, cfg.DiscardMaxAge)
	}
	recordMax, err := jobrecords.CheckMax(cfg.RecordMax)
	if err != nil {
		return nil, fmt.Errorf("conveyortest: %w", err)
	}
	d := &Driver{
		clock:     cfg.Clock,
		recs:      recs,
		maxRec:    cfg.DiscardMax,
		maxAge:    cfg.DiscardMaxAge,
		queues:    map[string]*queue{},
		deleted:   map[string]*queue{},
		done:      map[string]*finished{},
		recordMax: recordMax,
		limits:    map[string]map[string]*limit{},

		cancelWatches: map[chan broker.CanceledJob]map[string]bool{},
	}
	if d.maxRec == 0 {
		d.maxRec = broker.DefaultDiscardMax
	}
	if d.maxAge == 0 {
		d.maxAge = broker.DefaultDiscardMaxAge
	}
	if d.clock.fake() {
		d.clock.onMove(d.clockMoved)
	}
	return d, nil
}

// Now returns the time by the driver's clock.
func (d *Driver) Now() time.Time { return d.clock.Now() }

// Clock returns the driver's clock: nil for the system clock.
func (d *Driver) Clock() *Clock { return d.clock }

// Capabilities reports what the driver promises.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{AtLeastOnce: true, FIFO: true, Delay: true, Extend: true, Discard: true, Cancel: true, Records: true, Groups: true, Limits: true}
}

// Check returns nil: there is no server to reach.
func (d *Driver) Check(ctx context.Context) error { return ctx.Err() }

// queue is the state of one queue.
type queue struct {
	ready    []*entry
	timers   map[string]*entry // timer ID -> entry, due at entry.due
	inflight map[string]*entry // receipt -> entry
	wake     chan struct{}     // closed and replaced on every change
	watchers map[chan struct{}]bool
	fires    map[string]fire      // cron series -> last fire
	unique   map[string]time.Time // unique key -> when it is free again
	groups   map[string]*group    // group -> its state, while it has a job admitted or waiting (groups.go)
	grouped  map[string]*entry    // job ID -> the grouped job admitted or waiting under it
	limits   map[string]*limit    // class -> its concurrency limit (limits.go), shared with Driver.limits
	// processed and failed count acks, and retries and discards.
	processed, failed int64
}

// entry is one stored message.
type entry struct {
	msg      broker.Message
	seq      int64  // the order entries were made in
	receipt  string // unique among live entries: two in flight may share an ID
	token    string
	deadline time.Time
	due      int64 // a timer's due time, unix ms rounded up
	// admitted is set while the job holds a place in its group
	// (msg.Group): from its admission to its end.
	admitted bool
	// slots are the classes of the concurrency limits whose slots the
	// delivery holds (limits.go), the queue's ("") first.
	slots []string
	// canceled is set when the job was cancelled in flight (cancel.go):
	// its delivery is not handed back, whatever ends it.
	canceled bool
}

// fire is a cron series' record of its last fire.
type fire struct {
	last    int64 // unix ms
	expires time.Time
}

// queue returns the state of name; d.mu is held.
func (d *Driver) queue(name string) *queue {
	q := d.queues[name]
	if q == nil && d.deleted[name] != nil {
		q = d.deleted[name]
		delete(d.deleted, name)
		d.queues[name] = q
	}
	if q == nil {
		q = &queue{
			timers:   map[string]*entry{},
			inflight: map[string]*entry{},
			wake:     make(chan struct{}),
			watchers: map[chan struct{}]bool{},
			fires:    map[string]fire{},
			unique:   map[string]time.Time{},
			groups:   map[string]*group{},
			grouped:  map[string]*entry{},
			limits:   d.limitsOf(name),
		}
		d.queues[name] = q
	}
	return q
}

// notify wakes the fetches waiting on q.
func (q *queue) notify() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// clockMoved wakes every fetch and timer watcher, so that what the move
// made due is seen at once.
func (d *Driver) clockMoved() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range d.queues {
		q.notify()
		q.wakeWatchers()
	}
}

// newEntry returns an entry holding a copy of m as the Redis drivers
// store it, with a fresh receipt; d.mu is held.
func (d *Driver) newEntry(m *broker.Message) *entry {
	d.receipts++
	e := &entry{msg: *m, seq: d.receipts, receipt: "r" + strconv.FormatInt(d.receipts, 10)}
	e.msg.Payload = slices.Clone(m.Payload)
	e.msg.Headers = cloneHeaders(m.Headers)
	e.msg.UniqueKey, e.msg.UniqueTTL, e.msg.GroupLimit = "", 0, 0
	// A Group travels as the header broker.HeaderGroup, which a message
	// read back takes its Group from (internal/codec).
	if e.msg.Group != "" {
		if e.msg.Headers == nil {
			e.msg.Headers = map[string]string{}
		}
		e.msg.Headers[broker.HeaderGroup] = e.msg.Group
	} else {
		e.msg.Group = e.msg.Headers[broker.HeaderGroup]
	}
	return e
}

func cloneHeaders(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}

// Enqueue stores msgs, each in its queue: ready at once, or as a timer
// when its RunAt is ahead of the driver's clock. A message of a group
// (Message.Group) is ready once its group admits it; until then it waits
// in the group's line. It checks every message before it stores any, and
// refuses a grouped message due after the driver's clock. Like the Redis
// drivers, it refuses a message whose timer ID is pending, whose unique key
// is held, or that is grouped under the ID of a grouped job of the queue
// (admitted or waiting), each with a *broker.DuplicateError, and stores the
// others.
func (d *Driver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	nowMs := d.Now().UnixMilli()
	for _, m := range msgs {
		if m == nil {
			return &broker.MessageError{Field: "message", Reason: "nil"}
		}
		if err := broker.ValidateMessage(m); err != nil {
			return err
		}
		if err := checkGroupDue(m, nowMs); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.Now()
	var errs []error
	for _, m := range msgs {
		q := d.queue(m.Queue)
		due := dueMs(m.RunAt)
		later := due > now.UnixMilli()
		if later && q.timers[m.ID] != nil {
			errs = append(errs, &broker.DuplicateError{Queue: m.Queue, ID: m.ID, Message: m})
			continue
		}
		if m.UniqueKey != "" {
			if free, held := q.unique[m.UniqueKey]; held && now.Before(free) {
				errs = append(errs, &broker.DuplicateError{Queue: m.Queue, ID: m.ID, Key: m.UniqueKey, Message: m})
				continue
			}
		}
		if m.Group != "" && q.grouped[m.ID] != nil {
			errs = append(errs, &broker.DuplicateError{Queue: m.Queue, ID: m.ID, Message: m})
			continue
		}
		if m.UniqueKey != "" {
			q.unique[m.UniqueKey] = now.Add(m.UniqueTTL)
		}
		e := d.newEntry(m)
		switch {
		case later:
			q.putTimer(m.ID, e, due)
			continue
		case m.Group != "":
			q.hold(e, groups.Limit(m))
		default:
			q.ready = append(q.ready, e)
		}
		q.notify()
	}
	return errors.Join(errs...)
}

// sweep hands expired leases back to the ready list, oldest deadline
// first; it discards as poison the messages whose leases expired
// broker.DefaultMaxRecoveries times and removes the jobs cancelled in
// flight, which ends them in their groups. Every lease taken gives its
// concurrency limit slots back. d.mu is held.
func (d *Driver) sweep(q *queue, now time.Time) {
	var taken []*entry
	for r, e := range q.inflight {
		if now.Before(e.deadline) {
			continue
		}
		delete(q.inflight, r)
		taken = append(taken, e)
	}
	if len(taken) == 0 {
		return
	}
	slices.SortFunc(taken, func(a, b *entry) int { return cmp.Or(a.deadline.Compare(b.deadline), cmp.Compare(a.seq, b.seq)) })
	var ended []*entry
	for _, e := range taken {
		if e.canceled {
			// Its holder died before ending the cancelled job.
			ended = append(ended, e)
			continue
		}
		e.msg.Recoveries++
		if e.msg.Recoveries >= broker.DefaultMaxRecoveries {
			reason := fmt.Sprintf("%s: lease expired %d times", broker.PoisonReason, e.msg.Recoveries)
			d.discardLocked(e, reason, now)
			ended = append(ended, e)
			continue
		}
		q.ready = append(q.ready, e)
	}
	q.release(ended...)
	q.giveBack(taken...)
	q.notify()
}

// nextDeadline returns the earliest lease deadline of q, or zero.
func (q *queue) nextDeadline() time.Time {
	var t time.Time
	for _, e := range q.inflight {
		if t.IsZero() || e.deadline.Before(t) {
			t = e.deadline
		}
	}
	return t
}
