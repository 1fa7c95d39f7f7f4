package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/errlist"
)

// lanes is the pool's consumer when it serves several queues (or caps one):
// a broker.Consumer over one driver consumer per queue, its lanes. Each lane
// has a fetcher that keeps a small buffer of the queue's jobs filled,
// blocking in its consumer's Fetch while the queue is empty (so an empty
// queue costs no round trip: it sleeps in Redis on its own wake signal),
// and the pool's fetch loop takes jobs from the buffers in the order the
// pool's policy says:
//
//   - weighted: each job taken goes to the lane whose smooth weighted round
//     robin turn it is among the lanes that have jobs or a fetch in flight
//     (a turn waits for that fetch), so shares of started jobs follow the
//     weights among queues that have jobs, and a queue of the least weight
//     still gets its turn every sum-of-weights jobs. A lane's buffer holds
//     its weight's share of twice the pool's concurrency among the lanes
//     that are not empty, two at least.
//   - strict: jobs come from the first lane in priority order that has any;
//     a lane is passed over only while its buffer is empty and its queue is
//     known to be empty (its Fetch waits in Redis, broker.ConsumerOptions.Idle),
//     paused or at its cap. A lower lane fetches only then too, so lower
//     queues hold no leases while a higher one has work.
//
// A lane's buffered jobs that no fetch of the pool takes for roomWait (the
// workers are busy with other queues' jobs) go back to their queue for
// another pool, and so do those of a queue found paused.
type lanes struct {
	strict bool
	total  int // the pool's concurrency
	log    *slog.Logger
	ls     []*lane // strict: highest priority first
	byName map[string]*lane

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each change that could let a waiter on mu go on
	wanting int           // places of the pool's Fetch waiting for jobs (0: none waits)

	wg sync.WaitGroup // the fetchers and the watch
}

// lane is one queue of a lanes.
type lane struct {
	name   string
	cons   broker.Consumer
	weight int
	cap    int // most jobs of the queue the pool holds at once (0: no cap)

	// Guarded by lanes.mu.
	buf      []*broker.Delivery // fetched, not yet taken by the pool
	oldest   time.Time          // when the pool last took from buf, or buf filled from empty
	fetching bool               // a Fetch is in flight
	since    time.Time          // when it started
	idle     bool               // that Fetch found the queue empty and waits in Redis
	failing  bool               // the last Fetch failed; the fetcher backs off
	out      int                // taken by the pool and not finished
	turn     int                // smooth weighted round robin's current weight
	paused   bool               // the queue was found paused; cleared when a fetch brings jobs
	// leanUntil: the lane's buffered jobs waited behind busy workers and
	// went back; until then it fetches only for a Fetch of the pool that
	// waits (workers are free), not ahead of the workers.
	leanUntil time.Time
}

// supplying reports whether the lane has jobs to give, or will have when its
// Fetch in flight returns (it is not waiting on an empty queue). lanes.mu is
// held.
func (l *lane) supplying() bool {
	return !l.paused && (len(l.buf) > 0 || (l.fetching && !l.idle && !l.failing))
}

// newLanes opens a consumer for each queue of qs (weights or, when strict,
// priorities: the highest first). On error it closes those it opened.
func newLanes(ctx context.Context, d broker.Driver, qs []laneSpec, strict bool, total int, opts broker.ConsumerOptions, log *slog.Logger) (*lanes, error) {
	m := &lanes{strict: strict, total: total, log: log, byName: make(map[string]*lane, len(qs)), changed: make(chan struct{})}
	for _, q := range qs {
		// fetching until its fetcher first looks: a lower lane must not
		// take the start of the higher one's fetcher for an empty queue.
		l := &lane{name: q.name, weight: q.weight, cap: q.cap, fetching: true}
		o := opts
		o.Idle = func() { m.setIdle(l) }
		c, err := d.Open(ctx, q.name, &o)
		if err != nil {
			m.closeAll(ctx)
			return nil, fmt.Errorf("open queue %s: %w", q.name, err)
		}
		l.cons = c
		m.ls = append(m.ls, l)
		m.byName[q.name] = l
	}
	return m, nil
}

// laneSpec is one queue a pool serves: its weight (or priority) and cap.
type laneSpec struct {
	name   string
	weight int
	cap    int
}

// run starts the fetchers and the watch of buffered jobs; they stop when
// ctx ends. waiting reports whether the pool's own room holds jobs, so the
// watch asks about pauses while jobs wait there too.
func (m *lanes) run(ctx context.Context, waiting func() bool) {
	for _, l := range m.ls {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.fetch(ctx, l)
		}()
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.watch(ctx, waiting)
	}()
}

// changedLocked wakes everyone waiting for a change; m.mu is held.
func (m *lanes) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *lanes) setIdle(l *lane) {
	m.mu.Lock()
	if l.fetching && !l.idle {
		l.idle = true
		m.changedLocked()
	}
	m.mu.Unlock()
}

// mayFetch reports how many jobs l's fetcher may ask for now (0: wait for
// a change). m.mu is held.
func (m *lanes) mayFetch(l *lane) int {
	if m.strict {
		for _, h := range m.ls {
			if h == l {
				break
			}
			if h.supplying() {
				return 0 // a higher queue has work: leave this one in Redis
			}
		}
	}
	size := m.total
	if !m.strict {
		// The lane's weight's share of the concurrency among the lanes
		// that have jobs (or may: all but those waiting on an empty queue).
		sum := 0
		for _, o := range m.ls {
			if o == l || !(o.idle && len(o.buf) == 0) {
				sum += o.weight
			}
		}
		// Of twice the concurrency (running plus fetched ahead), and two
		// at least. When the workers take jobs faster than the lanes
		// refill, each lane gives about its buffer per round trip, so the
		// buffers, not only the round robin, must follow the weights.
		size = max(2, (2*m.total*l.weight+sum-1)/sum)
	}
	room := size - len(l.buf)
	if time.Now().Before(l.leanUntil) {
		room = min(room, m.wanting)
	}
	if l.cap > 0 {
		room = min(room, l.cap-l.out-len(l.buf))
	}
	// Refill once half the buffer is gone, or at once when it is empty.
	if room < 1 || (len(l.buf) > 0 && room < (size+1)/2) {
		return 0
	}
	return room
}

// fetch keeps l's buffer filled until ctx ends.
func (m *lanes) fetch(ctx context.Context, l *lane) {
	backoff := 100 * time.Millisecond
	for {
		m.mu.Lock()
		n := m.mayFetch(l)
		if n == 0 {
			if l.fetching {
				l.fetching = false
				m.changedLocked()
			}
			ch := m.changed
			m.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return
			}
		}
		l.fetching, l.idle, l.since = true, false, time.Now()
		m.mu.Unlock()

		ds, err := l.cons.Fetch(ctx, n)

		m.mu.Lock()
		l.fetching, l.idle = false, false
		l.failing = err != nil && ctx.Err() == nil
		if len(ds) > 0 {
			if len(l.buf) == 0 {
				l.oldest = time.Now()
			}
			l.buf = append(l.buf, ds...)
			l.paused = false // the driver fetches nothing from a paused queue
		}
		m.changedLocked()
		m.mu.Unlock()
		if err == nil {
			backoff = 100 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Error("fetch failed; retrying", "queue", l.name, "error", err, "in", backoff)
		if !backOff(ctx, &backoff) {
			return
		}
		m.mu.Lock()
		l.failing = false
		m.mu.Unlock()
	}
}

// Fetch takes between 1 and max buffered jobs as the policy says, waiting
// until there is one.
func (m *lanes) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	for {
		m.mu.Lock()
		out := m.take(max)
		if len(out) > 0 {
			m.wanting = 0
			m.changedLocked() // fetchers wait for room
			m.mu.Unlock()
			return out, nil
		}
		if m.wanting != max {
			m.wanting = max
			m.changedLocked() // lean lanes fetch for a pool that waits
		}
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			m.mu.Lock()
			m.wanting = 0
			m.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// take takes up to max buffered jobs; m.mu is held.
func (m *lanes) take(max int) []*broker.Delivery {
	var out []*broker.Delivery
	now := time.Now()
	if m.strict {
		for _, l := range m.ls {
			if l.paused {
				continue
			}
			n := min(max-len(out), len(l.buf))
			if n > 0 {
				out = append(out, l.buf[:n]...)
				l.buf = l.buf[n:]
				l.out += n
				l.oldest = now
				if len(l.buf) == 0 && !l.fetching && m.mayFetch(l) > 0 {
					// Its fetcher fetches as soon as it runs: count that
					// fetch as in flight already, so that lower queues wait
					// for what it finds.
					l.fetching = true
				}
			}
			if len(out) == max || l.supplying() {
				break // full, or this queue's fetch in flight comes first
			}
		}
		return out
	}
	for len(out) < max {
		// Smooth weighted round robin over the lanes that have jobs or
		// will (their fetch is in flight): each gains its weight, the
		// richest gives one job and loses the sum of weights. When the
		// richest has none yet, take no more until it has: skipping it
		// would hand its share to the lanes that refill faster.
		var best *lane
		sum := 0
		for _, l := range m.ls {
			if !l.supplying() {
				continue
			}
			sum += l.weight
			if best == nil || l.turn+l.weight > best.turn+best.weight {
				best = l
			}
		}
		if best == nil || len(best.buf) == 0 {
			break
		}
		for _, l := range m.ls {
			if l.supplying() {
				l.turn += l.weight
			}
		}
		best.turn -= sum
		out = append(out, best.buf[0])
		best.buf = best.buf[1:]
		best.out++
		best.oldest = now
		if len(best.buf) == 0 && !best.fetching && m.mayFetch(best) > 0 {
			best.fetching = true // as in strict order: its fetch is due
		}
	}
	return out
}

// done tells the lanes the pool is done with a job of queue (it finished
// or went back), freeing its place under the queue's cap.
func (m *lanes) done(queue string) {
	l := m.byName[queue]
	if l == nil {
		return
	}
	m.mu.Lock()
	l.out--
	if l.cap > 0 {
		m.changedLocked()
	}
	m.mu.Unlock()
}

// isPaused reports whether queue was last found paused.
func (m *lanes) isPaused(queue string) bool {
	l := m.byName[queue]
	if l == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return l.paused
}

// watch, every roomTick until ctx ends, hands back the buffered jobs of a
// lane that the pool has not taken from for roomWait, and, while a lane
// holds jobs or the pool's room does, asks whether its queue is paused
// (at most once per broker.PauseLag; the consumer's answer is shared with
// its fetches): a paused queue's buffered jobs go back, and the pool's
// workers hand back its jobs they take (see isPaused).
func (m *lanes) watch(ctx context.Context, waiting func() bool) {
	tick := time.NewTicker(roomTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		roomBusy := waiting()
		for _, l := range m.ls {
			m.mu.Lock()
			if l.fetching && !l.idle && !l.since.IsZero() && time.Since(l.since) >= blindIdle {
				// A driver that never calls ConsumerOptions.Idle: a fetch
				// this long is waiting on an empty queue.
				l.idle = true
				m.changedLocked()
			}
			held := len(l.buf) > 0
			stale := held && time.Since(l.oldest) >= roomWait
			m.mu.Unlock()
			pz, ok := l.cons.(broker.PauseWatcher)
			if ok && (held || roomBusy) {
				paused, err := pz.Paused(ctx)
				if err == nil {
					m.mu.Lock()
					if l.paused != paused {
						l.paused = paused
						m.changedLocked()
					}
					m.mu.Unlock()
					if paused {
						m.giveBack(ctx, l, "handed back buffered jobs: the queue is paused")
						continue
					}
				}
			}
			if stale {
				m.mu.Lock()
				l.leanUntil = time.Now().Add(leanFor)
				m.mu.Unlock()
				m.giveBack(ctx, l, "handed back jobs that waited behind busy workers")
			}
		}
	}
}

// giveBack releases l's buffered jobs to their queue.
func (m *lanes) giveBack(ctx context.Context, l *lane, msg string) {
	m.mu.Lock()
	ds := l.buf
	l.buf = nil
	if len(ds) > 0 {
		m.changedLocked()
	}
	m.mu.Unlock()
	if len(ds) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := l.cons.Release(rctx, ds...)
	m.log.Info(msg, "queue", l.name, "jobs", len(ds), "error", err)
}

// blindIdle is how long a lane's Fetch may be in flight before the lanes
// take its queue for empty though the driver did not say so
// (broker.ConsumerOptions.Idle): the longest such a driver stalls a
// strict or weighted choice.
const blindIdle = time.Second

// lane returns the lane of d's queue.
func (m *lanes) lane(d *broker.Delivery) (*lane, error) {
	if l := m.byName[d.Queue]; l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("worker: job %s of queue %q: the pool does not serve that queue", d.ID, d.Queue)
}

// each calls f with the deliveries of each queue in ds, in one call when
// they share one, and gathers the errors as one *multierror.Error of
// *broker.DeliveryError: an error f returns that names no delivery applies
// to every delivery of its call.
func (m *lanes) each(ds []*broker.Delivery, f func(c broker.Consumer, ds []*broker.Delivery) error) error {
	groups := make(map[*lane][]*broker.Delivery, 1)
	var errs *multierror.Error
	for _, d := range ds {
		l, err := m.lane(d)
		if err != nil {
			errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: err})
			continue
		}
		groups[l] = append(groups[l], d)
	}
	for l, group := range groups {
		err := f(l.cons, group)
		if err == nil {
			continue
		}
		named := false
		for _, e := range errlist.Split(err) {
			var de *broker.DeliveryError
			if errors.As(e, &de) {
				errs = multierror.Append(errs, de)
				named = true
			}
		}
		if !named {
			for _, d := range group {
				errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: err})
			}
		}
	}
	return errs.ErrorOrNil()
}

func (m *lanes) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	return m.each(ds, func(c broker.Consumer, ds []*broker.Delivery) error { return c.Ack(ctx, ds...) })
}

func (m *lanes) Release(ctx context.Context, ds ...*broker.Delivery) error {
	return m.each(ds, func(c broker.Consumer, ds []*broker.Delivery) error { return c.Release(ctx, ds...) })
}

func (m *lanes) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	return m.each(ds, func(c broker.Consumer, ds []*broker.Delivery) error { return c.Extend(ctx, ttl, ds...) })
}

func (m *lanes) Retry(ctx context.Context, d *broker.Delivery, at time.Time) error {
	l, err := m.lane(d)
	if err != nil {
		return err
	}
	return l.cons.Retry(ctx, d, at)
}

func (m *lanes) Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error {
	l, err := m.lane(d)
	if err != nil {
		return err
	}
	return l.cons.Postpone(ctx, d, at)
}

func (m *lanes) Discard(ctx context.Context, d *broker.Delivery, reason string) error {
	l, err := m.lane(d)
	if err != nil {
		return err
	}
	return l.cons.Discard(ctx, d, reason)
}

// Close waits for the fetchers to stop (the pool stopped them with the
// context it gave run), hands back what the buffers still hold and closes
// every lane's consumer.
func (m *lanes) Close(ctx context.Context) error {
	m.wg.Wait()
	for _, l := range m.ls {
		m.giveBack(ctx, l, "handed back buffered jobs at shutdown")
	}
	return m.closeAll(ctx)
}

func (m *lanes) closeAll(ctx context.Context) error {
	var errs *multierror.Error
	for _, l := range m.ls {
		if err := l.cons.Close(ctx); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("queue %s: %w", l.name, err))
		}
	}
	return errs.ErrorOrNil()
}

var _ broker.Consumer = (*lanes)(nil)
