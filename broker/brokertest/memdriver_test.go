package brokertest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
)

// memDriver is an in-memory reference driver with every capability. It
// exists to test the suite: a correct driver must pass it, and each mutant
// (a deliberately broken variant) must fail the test that guards what it
// breaks. Only its discard queue lives in Redis, where the suite reads it
// (and writes it, to test retention); memdiscards_test.go implements
// broker.Discards on it.
type memDriver struct {
	prefix string
	rdb    redis.UniversalClient
	mutant string

	mu       sync.Mutex
	dmu      sync.Mutex // orders changes to the discard keys (memdiscards_test.go)
	queues   map[string]*memQueue
	known    map[string]bool // the queue registry (meminspect_test.go)
	tokens   atomic.Int64
	receipts atomic.Int64
}

type memQueue struct {
	ready    []*memEntry
	timers   map[string]*memEntry // timer ID -> entry, due at entry.due
	inflight map[string]*memEntry // receipt -> entry
	wake     chan struct{}        // closed and replaced on every change
	watchers map[chan struct{}]bool
	fires    map[string]memFire   // cron series -> last fire
	unique   map[string]time.Time // unique key -> when it is free again
	// processed and failed are the Inspector's counters.
	processed, failed int64
}

type memEntry struct {
	msg       broker.Message
	raw       []byte // a value StoreRaw stored, decoded when fetched
	receipt   string // unique among live entries: two in flight may share an ID
	token     string
	deadline  time.Time
	due       int64 // unix ms, rounded up: a timer's due time
	promoted  bool  // the promotetwice mutant has promoted it once
	cancelled bool  // the cancelkeeps mutant has cancelled it
}

// memFire is a cron series' record of its last fire.
type memFire struct {
	last    int64 // unix ms
	expires time.Time
}

func newMemDriver(rdb redis.UniversalClient, prefix, mutant string) *memDriver {
	return &memDriver{prefix: prefix, rdb: rdb, mutant: mutant, queues: map[string]*memQueue{}, known: map[string]bool{}}
}

func (d *memDriver) Capabilities() broker.Capabilities {
	return broker.Capabilities{AtLeastOnce: true, FIFO: true, Delay: d.mutant != "nodelaycap", Extend: true, Discard: true}
}

func (d *memDriver) Check(ctx context.Context) error {
	if d.mutant == "checkfails" {
		return errors.New("mutant: check fails")
	}
	return d.rdb.Ping(ctx).Err()
}

// queue returns q's state; d.mu must be held.
func (d *memDriver) queue(name string) *memQueue {
	q := d.queues[name]
	if q == nil {
		q = &memQueue{
			timers:   map[string]*memEntry{},
			inflight: map[string]*memEntry{},
			wake:     make(chan struct{}),
			watchers: map[chan struct{}]bool{},
			fires:    map[string]memFire{},
		}
		d.queues[name] = q
	}
	return q
}

func (q *memQueue) notify() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// newEntry returns an entry holding a copy of m with a fresh receipt.
func (d *memDriver) newEntry(m *broker.Message) *memEntry {
	return &memEntry{msg: *m, receipt: "r" + strconv.FormatInt(d.receipts.Add(1), 10)}
}

// sweep hands expired leases back. Due timers wait for Promote, as they do
// in the Redis drivers: Fetch never promotes.
func (d *memDriver) sweep(q *memQueue, now time.Time) {
	if d.mutant != "noexpiry" {
		var expired []*memEntry
		for r, e := range q.inflight {
			if !now.Before(e.deadline) {
				delete(q.inflight, r)
				e.msg.Recoveries++
				if e.msg.Recoveries >= broker.DefaultMaxRecoveries && d.mutant != "nopoison" {
					d.poison(e, now)
					continue
				}
				expired = append(expired, e)
			}
		}
		slices.SortFunc(expired, func(a, b *memEntry) int { return a.deadline.Compare(b.deadline) })
		q.ready = append(q.ready, expired...)
	}
}

// poison moves e to the queue's discard key in Redis, where the suite reads it.
func (d *memDriver) poison(e *memEntry, now time.Time) {
	reason := fmt.Sprintf("%s: lease expired %d times", broker.PoisonReason, e.msg.Recoveries)
	rec := fmt.Appendf(nil, "d1,%d,%d:%s", now.UnixMilli(), len(reason), reason)
	rec = append(rec, codec.Encode(&e.msg, 0)...)
	_ = d.keepDiscard(context.Background(), e.msg.Queue, rec)
}

// StoreRaw implements brokertest.RawStorer: values join queue's ready
// list undecoded, as a Redis driver would find a value written by hand.
func (d *memDriver) StoreRaw(ctx context.Context, queue string, values ...[]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	for _, v := range values {
		e := d.newEntry(&broker.Message{Queue: queue})
		e.raw = slices.Clone(v)
		q.ready = append(q.ready, e)
	}
	q.notify()
	return nil
}

// decodeRaw decodes e, a value StoreRaw stored, at index i of q's ready
// list, and reports whether it is now a message to deliver. One that does
// not decode leaves the ready list for the discard key, with the decode
// error as its reason; the undecodableheld mutant leases it instead,
// delivered to no one, so that only its lease's expiries end it.
func (d *memDriver) decodeRaw(q *memQueue, i int, e *memEntry, now time.Time) bool {
	var m broker.Message
	_, err := codec.Decode(e.raw, &m)
	if err == nil {
		m.Queue = e.msg.Queue
		e.msg, e.raw = m, nil
		return true
	}
	q.ready = slices.Delete(q.ready, i, i+1)
	if d.mutant == "undecodableheld" {
		e.deadline = now.Add(time.Hour)
		q.inflight[e.receipt] = e
		return false
	}
	reason := err.Error()
	rec := fmt.Appendf(nil, "d1,%d,%d:%s", now.UnixMilli(), len(reason), reason)
	_ = d.keepDiscard(context.Background(), e.msg.Queue, append(rec, e.raw...))
	return false
}

// next returns the earliest time sweep has work, or zero.
func (q *memQueue) next() time.Time {
	var t time.Time
	for _, e := range q.inflight {
		if t.IsZero() || e.deadline.Before(t) {
			t = e.deadline
		}
	}
	return t
}

func (d *memDriver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	if d.mutant != "partialbatch" {
		for _, m := range msgs {
			if err := d.validate(m); err != nil {
				return err
			}
		}
	}
	for _, m := range msgs {
		if m != nil && m.Group != "" {
			return fmt.Errorf("mem: enqueue %s: Group: %w", m.ID, broker.ErrUnsupported)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var errs []error
	for _, m := range msgs {
		if err := d.validate(m); err != nil {
			if len(errs) == 0 {
				return err
			}
			return errors.Join(append(errs, err)...)
		}
		e := d.newEntry(m)
		if d.mutant == "dropheaders" {
			e.msg.Headers = nil
		}
		q := d.queue(m.Queue)
		d.known[m.Queue] = true
		due := dueMs(m.RunAt)
		later := due > now.UnixMilli() && d.mutant != "ignorerunat"
		if later && q.timers[m.ID] != nil && d.mutant != "duplicateoverwrites" {
			errs = append(errs, &broker.DuplicateError{Queue: m.Queue, ID: m.ID, Message: m})
			continue
		}
		if m.UniqueKey != "" && d.mutant != "uniqueignored" {
			if free, held := q.unique[m.UniqueKey]; held && now.Before(free) {
				errs = append(errs, &broker.DuplicateError{Queue: m.Queue, ID: m.ID, Key: m.UniqueKey, Message: m})
				continue
			}
			if q.unique == nil {
				q.unique = map[string]time.Time{}
			}
			q.unique[m.UniqueKey] = now.Add(m.UniqueTTL)
		}
		if later {
			d.putTimer(q, m.ID, e, due)
			continue
		}
		q.ready = append(q.ready, e)
		q.notify()
	}
	return errors.Join(errs...)
}

func (d *memDriver) validate(m *broker.Message) error {
	if m == nil {
		return &broker.MessageError{Field: "message", Reason: "nil"}
	}
	if d.mutant == "novalidate" {
		return nil
	}
	return broker.ValidateMessage(m)
}

func (d *memDriver) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	if d.mutant != "novalidate" {
		if err := broker.ValidateQueue(queue); err != nil {
			return nil, err
		}
	}
	if d.mutant != "noregistry" {
		d.mu.Lock()
		d.known[queue] = true
		d.mu.Unlock()
	}
	if d.mutant == "leakkey" {
		if err := d.rdb.Set(ctx, keys.Queue(d.prefix, queue).Part("consumers"), 1, 0).Err(); err != nil {
			return nil, err
		}
	}
	c := &memConsumer{d: d, queue: queue, vt: opts.VisibilityTimeoutOrDefault(), closed: make(chan struct{})}
	if opts != nil && d.mutant != "noidle" {
		c.idle = opts.Idle
	}
	return c, nil
}

type memConsumer struct {
	d      *memDriver
	queue  string
	vt     time.Duration
	idle   func() // ConsumerOptions.Idle, or nil
	once   sync.Once
	closed chan struct{}
}

func (c *memConsumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	d := c.d
	for {
		select {
		case <-c.closed:
			return nil, broker.ErrClosed
		default:
		}
		d.mu.Lock()
		q := d.queue(c.queue)
		now := time.Now()
		d.sweep(q, now)
		var out []*broker.Delivery
		for len(out) < max && len(q.ready) > 0 {
			i := 0
			if d.mutant == "lifo" {
				i = len(q.ready) - 1
			}
			e := q.ready[i]
			if e.raw != nil && !d.decodeRaw(q, i, e, now) {
				continue
			}
			// A message on its last chance is leased alone.
			last := broker.IsLastChance(e.msg.Recoveries, broker.DefaultMaxRecoveries) && d.mutant != "nolastchance"
			if last && len(out) > 0 {
				break
			}
			// The duplicate mutant leaves a first delivery in the ready list.
			if d.mutant != "duplicate" || e.token != "" {
				q.ready = slices.Delete(q.ready, i, i+1)
			}
			e.token = strconv.FormatInt(d.tokens.Add(1), 10)
			if d.mutant == "sametoken" {
				e.token = e.msg.ID
			}
			e.deadline = now.Add(c.vt)
			q.inflight[e.receipt] = e
			out = append(out, &broker.Delivery{Message: e.msg, Receipt: e.receipt, Token: e.token, LeaseDeadline: e.deadline, LastChance: last})
			if d.mutant == "onlyone" || last {
				break
			}
		}
		next, wake := q.next(), q.wake
		d.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		if c.idle != nil {
			c.idle()
		}
		if err := c.wait(ctx, next, wake); err != nil {
			return nil, err
		}
	}
}

// wait blocks until the queue changes, next comes, or the fetch must end.
func (c *memConsumer) wait(ctx context.Context, next time.Time, wake <-chan struct{}) error {
	var due <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
	}
	switch c.d.mutant {
	case "polling":
		wake = nil
		t := time.NewTimer(1500 * time.Millisecond)
		defer t.Stop()
		due = t.C
	case "deafcancel":
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-wake:
		case <-due:
		case <-t.C:
		}
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return broker.ErrClosed
	case <-wake:
	case <-due:
	}
	return nil
}

// settle checks each delivery's lease and applies f to the live ones.
func (c *memConsumer) settle(ds []*broker.Delivery, f func(q *memQueue, e *memEntry, d *broker.Delivery, now time.Time)) error {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(c.queue)
	now := time.Now()
	d.sweep(q, now)
	var errs []error
	for _, dl := range ds {
		e := q.inflight[dl.Receipt]
		if e == nil || (e.token != dl.Token && d.mutant != "nofence") {
			errs = append(errs, &broker.DeliveryError{Delivery: dl, Err: broker.ErrLeaseLost})
			continue
		}
		f(q, e, dl, now)
	}
	q.notify()
	return errors.Join(errs...)
}

func (c *memConsumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	return c.settle(ds, func(q *memQueue, e *memEntry, _ *broker.Delivery, _ time.Time) {
		delete(q.inflight, e.receipt)
		if c.d.mutant != "nocounters" {
			q.processed++
		}
	})
}

func (c *memConsumer) Retry(ctx context.Context, dl *broker.Delivery, at time.Time) error {
	return c.requeueAt(dl, at, c.d.mutant != "retrykeepsattempt")
}

func (c *memConsumer) Postpone(ctx context.Context, dl *broker.Delivery, at time.Time) error {
	return c.requeueAt(dl, at, c.d.mutant == "postponecounts")
}

func (c *memConsumer) requeueAt(dl *broker.Delivery, at time.Time, count bool) error {
	return c.settle([]*broker.Delivery{dl}, func(q *memQueue, e *memEntry, _ *broker.Delivery, now time.Time) {
		delete(q.inflight, e.receipt)
		if count {
			e.msg.Retries++
		}
		if count || c.d.mutant == "postponefails" {
			q.failed++
		}
		if due := dueMs(at); due > now.UnixMilli() && c.d.mutant != "ignorerunat" {
			if id := c.d.freeTimerID(q, e.msg.ID); id != "" {
				c.d.putTimer(q, id, e, due)
				return
			}
		}
		q.ready = append(q.ready, e)
	})
}

func (c *memConsumer) Release(ctx context.Context, ds ...*broker.Delivery) error {
	return c.settle(ds, func(q *memQueue, e *memEntry, _ *broker.Delivery, _ time.Time) {
		delete(q.inflight, e.receipt)
		if c.d.mutant == "releasecounts" {
			e.msg.Retries++
		}
		q.ready = append(q.ready, e)
	})
}

func (c *memConsumer) Discard(ctx context.Context, dl *broker.Delivery, reason string) error {
	var rec []byte
	err := c.settle([]*broker.Delivery{dl}, func(q *memQueue, e *memEntry, _ *broker.Delivery, now time.Time) {
		if c.d.mutant != "discardkeeps" {
			delete(q.inflight, e.receipt)
		}
		q.failed++
		rec = fmt.Appendf(nil, "d1,%d,%d:%s", now.UnixMilli(), len(reason), reason)
		rec = append(rec, codec.Encode(&e.msg, 0)...)
	})
	if err != nil || rec == nil {
		return err
	}
	return c.d.keepDiscard(ctx, c.queue, rec)
}

func (c *memConsumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	return c.settle(ds, func(q *memQueue, e *memEntry, dl *broker.Delivery, now time.Time) {
		if c.d.mutant != "extendnoop" {
			e.deadline = now.Add(ttl)
		}
		dl.LeaseDeadline = now.Add(ttl)
	})
}

func (c *memConsumer) Close(ctx context.Context) error {
	err := broker.ErrClosed
	if c.d.mutant == "closenoop" {
		return nil
	}
	c.once.Do(func() {
		close(c.closed)
		err = nil
	})
	return err
}

// The reference driver's timers follow the Redis drivers (internal/timers):
// a timer is an entry under its ID, due at a time in unix milliseconds
// rounded up, moved to ready only by Promote, earliest first (ties by ID, as
// a sorted set orders them).
var _ broker.Timers = (*memDriver)(nil)

// dueMs is t in unix milliseconds rounded up, so that nothing is due before
// t; the zero time and times before 1970 are 0.
func dueMs(t time.Time) int64 {
	if t.IsZero() || t.UnixNano() <= 0 {
		return 0
	}
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 != 0 {
		ms++
	}
	return ms
}

// head returns the due time of q's earliest timer; ok is false when none.
func (q *memQueue) head() (due int64, ok bool) {
	for _, e := range q.timers {
		if !ok || e.due < due {
			due, ok = e.due, true
		}
	}
	return due, ok
}

// putTimer stores e as the timer id of q, due at due, and wakes the
// watchers when it is now the earliest; the caller made sure id is free.
func (d *memDriver) putTimer(q *memQueue, id string, e *memEntry, due int64) {
	head, ok := q.head()
	e.due = due
	q.timers[id] = e
	if !ok || due < head {
		d.wakeWatchers(q)
	}
}

func (d *memDriver) wakeWatchers(q *memQueue) {
	if d.mutant == "nowake" {
		return
	}
	for ch := range q.watchers {
		select {
		case ch <- struct{}{}:
		default: // one wake-up waits already
		}
	}
}

// freeTimerID returns the timer ID for a retry of message id: id when free,
// else the first free id#r<n>, else "" (the retry goes to ready).
func (d *memDriver) freeTimerID(q *memQueue, id string) string {
	if q.timers[id] == nil || d.mutant == "retryoverwrites" {
		return id
	}
	for i := 1; i <= 16; i++ {
		if v := id + "#r" + strconv.Itoa(i); q.timers[v] == nil {
			return v
		}
	}
	return ""
}

// sortedTimers returns q's timer IDs, earliest first.
func (d *memDriver) sortedTimers(q *memQueue) []string {
	ids := make([]string, 0, len(q.timers))
	for id := range q.timers {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if d.mutant != "pendingunsorted" {
			if c := cmp.Compare(q.timers[a].due, q.timers[b].due); c != 0 {
				return c
			}
		}
		return strings.Compare(a, b)
	})
	return ids
}

func (d *memDriver) checkQueue(queue string) error {
	if d.mutant == "novalidate" {
		return nil
	}
	return broker.ValidateQueue(queue)
}

func (d *memDriver) checkTimerID(queue, id string) error {
	if err := d.checkQueue(queue); err != nil {
		return err
	}
	return d.validate(&broker.Message{ID: id, Kind: "timer", Queue: queue})
}

func (d *memDriver) Promote(ctx context.Context, queue string, most int) (broker.Promotion, error) {
	if err := d.checkQueue(queue); err != nil {
		return broker.Promotion{}, err
	}
	if most < 1 {
		return broker.Promotion{}, fmt.Errorf("mem: promote: max %d is not positive", most)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	now := time.Now()
	dueBy := now.UnixMilli()
	if d.mutant == "promoteearly" {
		dueBy += 250
	}
	most = min(most, 1000)
	n := 0
	var late time.Duration
	for _, id := range d.sortedTimers(q) {
		e := q.timers[id]
		if n == most || e.due > dueBy {
			break
		}
		if n == 0 {
			late = max(0, now.Sub(time.UnixMilli(e.due)))
		}
		n++
		if d.mutant == "promotetwice" && !e.promoted {
			e.promoted = true
			q.ready = append(q.ready, d.newEntry(&e.msg))
			continue
		}
		delete(q.timers, id)
		q.ready = append(q.ready, e)
	}
	if n > 0 {
		q.notify()
	}
	p := broker.Promotion{Promoted: n, Next: -1, Late: late}
	if head, ok := q.head(); ok {
		p.Next = max(0, time.UnixMilli(head).Sub(now))
	}
	return p, nil
}

func (d *memDriver) Cancel(ctx context.Context, queue, id string) (bool, error) {
	if err := d.checkTimerID(queue, id); err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	e := q.timers[id]
	if e == nil {
		return d.mutant == "cancelalwaystrue", nil
	}
	if d.mutant == "cancelkeeps" {
		// Marks the timer cancelled, which the promoter does not look at.
		if e.cancelled {
			return false, nil
		}
		e.cancelled = true
		return true, nil
	}
	delete(q.timers, id)
	return true, nil
}

func (d *memDriver) Reschedule(ctx context.Context, queue, id string, at time.Time) (bool, error) {
	if err := d.checkTimerID(queue, id); err != nil {
		return false, err
	}
	if time.Until(at) > 100*365*24*time.Hour {
		return false, &broker.MessageError{ID: id, Field: "RunAt", Reason: "more than 100 years ahead"}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	e := q.timers[id]
	if e == nil {
		return false, nil
	}
	if d.mutant == "reschedulenoop" {
		return true, nil
	}
	head, _ := q.head()
	e.due = dueMs(at)
	if e.due < head {
		d.wakeWatchers(q)
	}
	return true, nil
}

func (d *memDriver) PendingTimers(ctx context.Context, queue string, offset, limit int) ([]*broker.Message, int64, error) {
	if err := d.checkQueue(queue); err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 {
		return nil, 0, fmt.Errorf("mem: pending timers: offset %d, limit %d: want offset >= 0 and limit >= 1", offset, limit)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(queue)
	ids := d.sortedTimers(q)
	page := ids[min(offset, len(ids)):min(offset+min(limit, 1000), len(ids))]
	out := make([]*broker.Message, len(page))
	for i, id := range page {
		e := q.timers[id]
		m := e.msg
		m.Payload = slices.Clone(m.Payload)
		m.Headers = maps.Clone(m.Headers)
		m.Queue = queue
		m.RunAt = time.UnixMilli(e.due)
		out[i] = &m
	}
	return out, int64(len(ids)), nil
}

func (d *memDriver) WatchTimers(ctx context.Context, queue string) (<-chan struct{}, error) {
	if err := d.checkQueue(queue); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	q := d.queue(queue)
	q.watchers[ch] = true
	d.mu.Unlock()
	go func() {
		<-ctx.Done()
		// Sends happen under d.mu, so none can follow the close.
		d.mu.Lock()
		delete(q.watchers, ch)
		close(ch)
		d.mu.Unlock()
	}()
	return ch, nil
}

func (d *memDriver) EnqueueFire(ctx context.Context, series string, m *broker.Message, keep time.Duration) (bool, error) {
	if m == nil {
		return false, &broker.MessageError{Field: "message", Reason: "nil"}
	}
	if err := d.validate(m); err != nil {
		return false, err
	}
	if err := d.checkQueue(series); err != nil {
		return false, fmt.Errorf("mem: fire: series %q: %w", series, err)
	}
	if m.RunAt.IsZero() {
		return false, &broker.MessageError{ID: m.ID, Field: "RunAt", Reason: "a fire needs its time"}
	}
	if m.Group != "" {
		return false, fmt.Errorf("mem: fire %s: Group: %w", m.ID, broker.ErrUnsupported)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queue(m.Queue)
	now := time.Now()
	at := dueMs(m.RunAt)
	if at > now.Add(time.Minute).UnixMilli() {
		return false, fmt.Errorf("mem: fire at %v is over a minute ahead of the clock", at)
	}
	if f, ok := q.fires[series]; ok && now.Before(f.expires) && f.last >= at && d.mutant != "fireignoreslast" {
		return false, nil
	}
	if q.timers[m.ID] != nil {
		return false, nil
	}
	q.fires[series] = memFire{last: at, expires: now.Add(max(keep, time.Second))}
	d.putTimer(q, m.ID, d.newEntry(m), at)
	return true, nil
}

// CronSeries implements broker.CronLister: the series whose records live,
// sorted by name (the seriesreversed mutant sorts them backwards; the
// serieskeepsexpired mutant lists expired records too).
func (d *memDriver) CronSeries(ctx context.Context, queue string) ([]broker.CronSeries, error) {
	if err := d.checkQueue(queue); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var out []broker.CronSeries
	for name, f := range d.queue(queue).fires {
		if now.Before(f.expires) || d.mutant == "serieskeepsexpired" {
			out = append(out, broker.CronSeries{Name: name, LastFire: time.UnixMilli(f.last)})
		}
	}
	slices.SortFunc(out, func(a, b broker.CronSeries) int { return strings.Compare(a.Name, b.Name) })
	if d.mutant == "seriesreversed" {
		slices.Reverse(out)
	}
	return out, nil
}

func (d *memDriver) LastFire(ctx context.Context, queue, series string) (time.Time, bool, error) {
	if err := d.checkQueue(queue); err != nil {
		return time.Time{}, false, err
	}
	if err := d.checkQueue(series); err != nil {
		return time.Time{}, false, fmt.Errorf("mem: last fire: series %q: %w", series, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.queue(queue).fires[series]
	if !ok || !time.Now().Before(f.expires) {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(f.last), true, nil
}
