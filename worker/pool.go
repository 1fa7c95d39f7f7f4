package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/errlist"
	"github.com/conveyorq/conveyor/internal/groupcommit"
	"github.com/conveyorq/conveyor/internal/runjob"
	"github.com/conveyorq/conveyor/internal/workers"
	"github.com/conveyorq/conveyor/retry"
)

// ErrShutdown is the cause of a handler context cancelled because the pool
// stopped and the shutdown grace ran out.
var ErrShutdown = errors.New("conveyor: pool shutting down")

// ErrPoolRunning is returned by Run when the pool already ran.
var ErrPoolRunning = errors.New("conveyor: pool already started")

// Pool fetches jobs from one queue, or several (Config.Queues), and runs
// them, at most Concurrency at a time.
type Pool struct {
	d   broker.Driver
	h   conveyor.Handler
	cfg Config
	log *slog.Logger
	// defaultTimeout is DefaultJobTimeout; tests shorten it.
	defaultTimeout time.Duration
	// id names the pool in the fleet: its worker registry entry and its
	// candidacy for the queue's keeper. host is this machine's name.
	id, host string

	started      atomic.Bool
	shutdown     chan struct{} // closed by Shutdown
	stopping     chan struct{} // closed when Run starts to stop, for any reason
	stoppingOnce sync.Once
	stopOnce     sync.Once
	done         chan struct{} // closed when Run returns

	mu      sync.Mutex
	running map[*broker.Delivery]*task
	// early holds cancel notices for deliveries the pool did not hold when
	// they came (by Receipt, with when): the notice can overtake the reply
	// of the fetch that leased the job (see cancelHeld).
	early map[string]time.Time
	wg    sync.WaitGroup
	// suspects counts held jobs on their last chance (Delivery.LastChance:
	// one more lease expiry makes them poison); while there is one, the
	// pool fetches nothing more for up to a HeartbeatInterval, so that a
	// poison job does not take jobs fetched after it down with it and count
	// a recovery on them too. Jobs with fewer recoveries run in batches, so
	// a crash's jobs are recovered at full speed. suspectDone is signalled
	// when the count drops to 0.
	suspects    int
	suspectDone chan struct{}

	// free counts the waiting room's free places (fetched jobs not yet
	// taken by a worker use the others); the fetch loop waits until it
	// reaches want, and the worker that makes it reach want wakes it
	// through freed, so the fetch loop wakes once or twice a fetch, not once
	// a job.
	free  atomic.Int64
	want  atomic.Int64
	freed chan struct{}
	// room is the waiting room's size: Prefetch, or between Prefetch and
	// roomMax when it adapts (see Config.Prefetch and adaptRoom); starved
	// is set by a worker that found the room empty, and read by the next
	// full fetch.
	room    atomic.Int64
	starved atomic.Bool

	// lean is set by the room's watch (see watchRoom) when it handed the
	// room's jobs back: the fetch loop then fetches only for idle workers,
	// which count themselves in idle and wake it through idleWake, until
	// the watch clears lean again. Outside lean, idle is not kept, so a job
	// costs the workers one atomic load for it.
	lean     atomic.Bool
	idle     atomic.Int64
	idleWake chan struct{}
	// paused is what the pool last learnt of its queue's pause (see
	// watchRoom): while set, a worker hands a waiting job back instead of
	// running it. A fetch that returns jobs clears it: the driver fetches
	// nothing from a paused queue.
	paused atomic.Bool

	// handlersCancelled is set once the pool cancels every running job's
	// context (the grace is over); a job starting after that starts
	// cancelled.
	handlersCancelled atomic.Bool

	// spawn starts one more worker; the fetch loop sets it.
	spawn func()

	cons broker.Consumer
	// lanes is cons when the pool serves several queues or caps one
	// (Config.Queues, QueueConcurrency); nil otherwise.
	lanes    *lanes
	acks     *groupcommit.Committer[*broker.Delivery]
	settling chan struct{} // bounds retries and discards in flight
	ackq     chan *task    // jobs to ack, for the acker
	acking   sync.WaitGroup
}

// task is one running job.
type task struct {
	d      *broker.Delivery
	job    *conveyor.Job
	vt     time.Duration // the job's lease: its own visibility timeout or the pool's
	cancel context.CancelCauseFunc
	// extending serialises lease extensions of d (the heartbeat and
	// Job.Extend) and guards d.LeaseDeadline; it is held across the
	// extension's round trip, mu never is.
	extending sync.Mutex
	// mu guards the fields below and cancel, for moments, never across a
	// round trip: finishing a job and cancelling it (shutdown, a lost
	// lease) must not wait on Redis.
	mu          sync.Mutex
	released    bool          // handed back to the queue by the pool
	handedBack  chan struct{} // closed when the drain's hand-back returned; releaseErr is then set
	releaseErr  error         // why the hand-back failed (the lease brings the job back)
	returned    bool          // the handler returned; the pool settles it
	lost        bool          // the heartbeat found the lease lost
	canceled    bool          // the job was cancelled (Client.CancelJob): not retried
	ackCanceled bool          // the pool acks it as cancelled (settleCanceled)
	abandoned   bool          // stuck past its timeout: not extended, its worker replaced
	timeout     time.Duration // the handler's timeout (0: none), for the log
	started     time.Time     // when the handler started (zero: not yet), for the registry
	// Set before the handler starts, read by the watchdog (see watch):
	// when the default timeout cancels the handler (zero: the handler's
	// context has its own deadline, or there is none), and when a handler
	// that has not returned is abandoned (zero: never).
	expires, abandonAt time.Time
}

// NewPool returns a pool that runs h on the jobs of cfg.Queue (or
// cfg.Queues).
func NewPool(d broker.Driver, h conveyor.Handler, cfg *Config) (*Pool, error) {
	if d == nil || h == nil {
		return nil, errors.New("worker: NewPool: nil driver or handler")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(c.Middleware) > 0 {
		h = conveyor.Chain(c.Middleware...)(h)
	}
	host, _ := os.Hostname()
	log := c.Logger.With("queue", c.Queue)
	if c.Queue == "" {
		log = c.Logger.With("queues", strings.Join(c.queueNames(), ","))
	}
	return &Pool{
		d: d, h: h, cfg: c, log: log, defaultTimeout: DefaultJobTimeout,
		id: workers.NewID(host, os.Getpid()), host: host,
		shutdown:    make(chan struct{}),
		stopping:    make(chan struct{}),
		done:        make(chan struct{}),
		running:     make(map[*broker.Delivery]*task),
		suspectDone: make(chan struct{}, 1),
		freed:       make(chan struct{}, 1),
		idleWake:    make(chan struct{}, 1),
		settling:    make(chan struct{}, 2*c.Concurrency),
		ackq:        make(chan *task, 2*c.Concurrency),
	}, nil
}

// Run fetches and runs jobs until ctx is cancelled or Shutdown is called,
// then stops fetching, lets running jobs finish for ShutdownGrace, cancels
// the rest and hands their jobs back to the queue. It returns nil after a
// clean stop, or the error that kept it from starting (Redis unreachable).
func (p *Pool) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return ErrPoolRunning
	}
	defer close(p.done)
	defer p.markStopping() // also when Run returns before it started
	select {
	case <-ctx.Done():
		return nil // stopped before it started
	case <-p.shutdown:
		return nil
	default:
	}
	cons, err := p.start(ctx)
	if err != nil {
		select {
		case <-ctx.Done():
			return nil // stopped while starting: not a failure to start
		case <-p.shutdown:
			return nil
		default:
			return err
		}
	}
	p.cons = cons
	p.acks = groupcommit.New(1, 1, 256, nil, p.sendAcks)

	fetchCtx, stopFetching := context.WithCancel(ctx)
	defer stopFetching()
	go func() {
		select {
		case <-p.shutdown:
			stopFetching()
		case <-fetchCtx.Done():
		}
		p.markStopping()
	}()
	// Handlers keep ctx's values but not its cancellation: the pool decides
	// when they stop (after the grace), cancelling each job's context.
	handlerCtx := context.WithoutCancel(ctx)
	defer p.cancelRunning(ErrShutdown)

	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	go func() {
		defer close(hbStopped)
		p.heartbeat(hbDone)
	}()

	ackDone := make(chan struct{})
	ackStopped := make(chan struct{})
	go func() {
		defer close(ackStopped)
		p.acker(ackDone)
	}()

	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch() // running jobs may be cancelled until Run returns
	p.startCancelWatch(watchCtx)
	regStopped := p.startRegistry(fetchCtx)
	promoterStopped := p.startKeepers(fetchCtx)
	p.fetchLoop(fetchCtx, handlerCtx)
	p.drain()
	<-promoterStopped // it stops with fetching; waited for after the drain, which needs no Redis reply from it
	p.acking.Wait()
	close(ackDone)
	<-ackStopped

	close(hbDone)
	<-hbStopped
	<-regStopped // it stopped with fetching and removed the pool's entry
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := cons.Close(closeCtx); err != nil {
		p.log.Warn("close consumer", "error", err)
	}
	return nil
}

func (p *Pool) markStopping() { p.stoppingOnce.Do(func() { close(p.stopping) }) }

// Stopping returns a channel closed when Run starts to stop (its context
// was cancelled or Shutdown was called): fetching has stopped and the grace
// runs. Long handlers may watch it to reach a checkpoint early.
func (p *Pool) Stopping() <-chan struct{} { return p.stopping }

// Shutdown stops the pool as cancelling Run's context does, and waits until
// Run has returned or ctx is done.
func (p *Pool) Shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.shutdown) })
	if !p.started.Load() {
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start checks the driver and opens the queue, giving up when ctx ends or
// Shutdown is called.
func (p *Pool) start(ctx context.Context) (broker.Consumer, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.shutdown:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := p.d.Check(ctx); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	_, kept := p.d.(broker.Upkeeper)
	opts := broker.ConsumerOptions{VisibilityTimeout: p.cfg.VisibilityTimeout, Kept: kept}
	if specs := p.cfg.laneSpecs(); specs != nil {
		m, err := newLanes(ctx, p.d, specs, p.cfg.StrictPriority, p.cfg.Concurrency, opts, p.log)
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		p.lanes = m
		return m, nil
	}
	cons, err := p.d.Open(ctx, p.cfg.Queue, &opts)
	if err != nil {
		return nil, fmt.Errorf("worker: open queue %s: %w", p.cfg.Queue, err)
	}
	return cons, nil
}

// fetchLoop keeps up to a room of fetched jobs (Prefetch, or up to
// Config.roomMax when it adapts) waiting for the Concurrency workers, so
// that a fetch round trip overlaps the jobs running rather than waiting
// for them: the pool holds at most Concurrency plus the room's leases
// (running plus waiting) and runs at most Concurrency handlers. The driver
// blocks while the queue is empty.
func (p *Pool) fetchLoop(ctx, handlerCtx context.Context) {
	p.room.Store(int64(p.cfg.Prefetch))
	p.free.Store(int64(p.cfg.Prefetch))
	waiting := make(chan *task, p.cfg.roomMax) // never full: a fetch asks for at most the free places
	p.spawn = func() { go p.work(ctx, handlerCtx, waiting) }
	for range p.cfg.Concurrency {
		p.spawn()
	}
	go p.watchRoom(ctx, waiting)
	if p.lanes != nil {
		p.lanes.run(ctx, func() bool { return len(waiting) > 0 })
	}
	defer func() {
		// Jobs fetched but not started go back to the queue at once; the
		// workers hand back any they took meanwhile, then stop.
		p.handBack(drainRoom(waiting))
		close(waiting)
	}()

	backoff := 100 * time.Millisecond
	// While the queue has a backlog (the last fetch was full), wait until
	// three quarters of the waiting room are free before fetching again:
	// fewer, larger fetches cost Redis far less per job (a fetch.lua call
	// costs Redis about as much as eight jobs in it), and the quarter still
	// waiting covers the round trip. When the queue runs dry, fetch as soon
	// as there is room for one, for latency.
	want := 1
	backlog := false // the last fetch came back full
	for {
		if !p.waitSuspects(ctx) {
			return
		}
		if !p.waitFree(ctx, want) || ctx.Err() != nil {
			return
		}
		n := int(p.free.Load()) // want or more, unless the room shrank meanwhile
		if n < 1 {
			continue // shrinkRoom took the places: wait for the room again
		}
		if p.lean.Load() {
			// Jobs waited behind busy workers: fetch only for idle ones.
			if n = min(n, int(p.idle.Load())); n == 0 {
				t := time.NewTimer(roomTick) // lean may end meanwhile
				select {
				case <-p.idleWake:
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
				t.Stop()
				continue
			}
		}
		if !backlog {
			// The room ran dry while the queue had none to fill it with:
			// that asks for no larger room (see adaptRoom). Nor does this
			// fetch, which may wait on an empty queue: it asks for at most
			// the room's least size, so that a room shrunk meanwhile is
			// not filled by the jobs it just handed back.
			p.starved.Store(false)
			n = min(n, max(1, p.cfg.Prefetch))
		}
		p.free.Add(-int64(n))
		ds, err := p.cons.Fetch(ctx, n)
		p.free.Add(int64(n - len(ds)))
		if len(ds) > 0 && p.paused.Load() {
			p.paused.Store(false)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Error("fetch failed; retrying", "error", err, "in", backoff)
			if !backOff(ctx, &backoff) {
				return
			}
			continue
		}
		backoff = 100 * time.Millisecond
		want = 1
		backlog = len(ds) == n
		if backlog {
			room := p.adaptRoom()
			want = max(1, room-room/4)
		}
		// One task allocation and one p.mu section per fetch, not per job.
		ts := make([]task, len(ds))
		p.wg.Add(len(ds))
		p.mu.Lock()
		for i, d := range ds {
			t := &ts[i]
			t.d, t.vt = d, p.leaseFor(d)
			t.job = conveyor.NewJob(d, settler{p: p, t: t})
			p.running[d] = t
			if len(p.early) > 0 {
				if _, ok := p.early[d.Receipt]; ok {
					t.canceled = true // cancelled before this fetch's reply came
					delete(p.early, d.Receipt)
				}
			}
			if d.LastChance {
				p.suspects++
			}
		}
		p.mu.Unlock()
		for i := range ts {
			waiting <- &ts[i] // never blocks: a free place was taken for it
		}
	}
}

// adaptRoom is called after a full fetch (the queue has a backlog): when
// a worker found the room empty since the fetch before (itself full, so
// the room ran dry under a backlog, not because the queue was empty), the
// room grows by half of Concurrency (one at least), up to roomMax (see
// Config.Prefetch), unless jobs waited behind busy workers of late (lean).
// It returns the room's size.
func (p *Pool) adaptRoom() int {
	room := p.room.Load()
	if !p.starved.Swap(false) || room >= int64(p.cfg.roomMax) || p.lean.Load() {
		return int(room)
	}
	grow := min(int64(p.cfg.roomMax)-room, max(1, int64(p.cfg.Concurrency)/2))
	if !p.room.CompareAndSwap(room, room+grow) {
		return int(p.room.Load()) // the watch shrank it meanwhile
	}
	p.free.Add(grow)
	return int(room + grow)
}

// shrinkRoom takes the room back to Prefetch (a grown room's jobs waited
// behind busy workers): free may drop below zero, and the fetch loop then
// waits until workers have taken enough jobs.
func (p *Pool) shrinkRoom() {
	if old := p.room.Swap(int64(p.cfg.Prefetch)); old > int64(p.cfg.Prefetch) {
		p.free.Add(int64(p.cfg.Prefetch) - old)
		select { // the fetch loop may wait for more places than the room has now
		case p.freed <- struct{}{}:
		default:
		}
	}
}

// backOff waits *b after a failed fetch and doubles it, up to 5s; false
// when ctx ended first.
func backOff(ctx context.Context, b *time.Duration) bool {
	t := time.NewTimer(*b)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	*b = min(2**b, 5*time.Second)
	return true
}

// waitFree waits until the waiting room has want free places; false when
// ctx ended first.
func (p *Pool) waitFree(ctx context.Context, want int) bool {
	for {
		// A room shrunk meanwhile (shrinkRoom) asks for no more than it
		// holds.
		w := min(int64(want), p.room.Load())
		p.want.Store(w)
		if p.free.Load() >= w {
			return true
		}
		select {
		case <-p.freed:
		case <-ctx.Done():
			return false
		}
	}
}

// work runs waiting jobs one at a time until the fetch loop closes waiting.
func (p *Pool) work(ctx, handlerCtx context.Context, waiting <-chan *task) {
	for {
		counted := p.lean.Load()
		if counted {
			p.idle.Add(1)
			select {
			case p.idleWake <- struct{}{}:
			default:
			}
		}
		if len(waiting) == 0 && !p.starved.Load() {
			p.starved.Store(true) // the room ran dry (see adaptRoom)
		}
		t, ok := <-waiting
		if counted {
			p.idle.Add(-1)
		}
		if !ok {
			return
		}
		if p.free.Add(1) >= p.want.Load() {
			select {
			case p.freed <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
		if ctx.Err() != nil || p.paused.Load() || (p.lanes != nil && p.lanes.isPaused(t.d.Queue)) {
			// Stopping, or the queue paused: do not start new jobs.
			p.handBack([]*task{t})
			continue
		}
		t.mu.Lock()
		lost := t.lost
		t.mu.Unlock()
		if lost { // its lease ran out while it waited: it is someone else's now
			p.log.Warn("lease lost before the job started; skipped", p.jobAttrs(t.d)...)
			p.finish(t, conveyor.Settlement{Outcome: conveyor.OutcomeLeaseLost, Err: broker.ErrLeaseLost})
			continue
		}
		p.run(handlerCtx, t)
		t.mu.Lock()
		abandoned := t.abandoned
		t.mu.Unlock()
		if abandoned {
			return // another worker took this one's place
		}
	}
}

// watch is the watchdog's round, every HeartbeatInterval: it cancels the
// context of each handler past the default timeout (cause
// context.DeadlineExceeded) and abandons each one still running a
// VisibilityTimeout past its timeout. Both happen within a heartbeat
// interval of their time.
func (p *Pool) watch(tasks []*task) {
	now := time.Now()
	for _, t := range tasks {
		t.mu.Lock()
		expired := !t.returned && !t.expires.IsZero() && !now.Before(t.expires)
		stuck := !t.returned && !t.abandonAt.IsZero() && !now.Before(t.abandonAt)
		cancel := t.cancel
		if expired {
			t.expires = time.Time{}
		}
		t.mu.Unlock()
		if expired && cancel != nil {
			cancel(context.DeadlineExceeded)
		}
		if stuck {
			p.abandon(t)
		}
	}
}

// abandon gives up on t, whose handler has not returned long after its
// context ended: the heartbeat stops extending its lease, so the job runs
// again elsewhere once the lease runs out, and a new worker takes the place
// of the stuck one, which stops when (if ever) its handler returns.
func (p *Pool) abandon(t *task) {
	t.mu.Lock()
	if t.returned || t.abandoned {
		t.mu.Unlock()
		return
	}
	t.abandoned = true
	t.mu.Unlock()
	p.log.Error("handler did not return after its timeout; abandoned: its lease is let run out and the job will run again",
		append(p.jobAttrs(t.d), "timeout", t.timeout)...)
	p.spawn()
}

// handBack releases jobs that were fetched but never started.
func (p *Pool) handBack(ts []*task) {
	if len(ts) == 0 {
		return
	}
	ds := make([]*broker.Delivery, len(ts))
	for i, t := range ts {
		t.mu.Lock()
		t.released = true
		t.mu.Unlock()
		ds[i] = t.d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.cons.Release(ctx, ds...); err != nil {
		p.log.Warn("hand back unstarted jobs", "jobs", len(ds), "error", err)
	}
	p.mu.Lock()
	for _, d := range ds {
		p.forget(d)
	}
	p.mu.Unlock()
	for range ts {
		p.wg.Done()
	}
}

// drain waits up to the grace for running jobs, then cancels the rest and
// hands their jobs back at once.
func (p *Pool) drain() {
	finished := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(finished)
	}()
	grace := time.NewTimer(p.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-finished:
		return
	case <-grace.C:
	}
	handedBack := make(chan struct{})
	p.mu.Lock()
	var ds []*broker.Delivery
	for d, t := range p.running {
		t.mu.Lock()
		// A job whose handler returned is being settled; leave it be.
		if !t.job.Settled() && !t.released && !t.returned {
			t.released = true
			t.handedBack = handedBack
			ds = append(ds, d)
		}
		t.mu.Unlock()
	}
	p.mu.Unlock()
	// Mark them released before cancelling: a handler that returns on the
	// cancel must find its job handed back, not settle it as a failure.
	p.cancelRunning(ErrShutdown)
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.cons.Release(ctx, ds...)
	p.log.Info("shutdown grace over; handed running jobs back", "jobs", len(ds), "error", err)
	if err != nil {
		errs := perDelivery(ds, err)
		p.mu.Lock()
		for i, d := range ds {
			if t := p.running[d]; t != nil && errs[i] != nil {
				t.mu.Lock()
				t.releaseErr = errs[i]
				t.mu.Unlock()
			}
		}
		p.mu.Unlock()
	}
	close(handedBack) // before waiting for the handlers: they wait for it
	// Give the cancelled handlers a moment to return, so that Run rarely
	// returns under their feet; one that ignores its context is left behind.
	wait := time.NewTimer(handlerExitWait)
	defer wait.Stop()
	select {
	case <-finished:
	case <-wait.C:
		p.log.Warn("handlers still running after cancellation; Run returns without them")
	}
}

// cancelRunning cancels the context of every running job with cause, and of
// every job that starts from now on. Job contexts derive from a context
// that is never cancelled, so starting one registers nothing with a
// parent: a parent shared by every job would take its lock twice a job.
func (p *Pool) cancelRunning(cause error) {
	p.handlersCancelled.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.running {
		t.mu.Lock()
		if t.cancel != nil {
			t.cancel(cause)
		}
		t.mu.Unlock()
	}
}

// handlerExitWait bounds how long Run waits, after the grace, for cancelled
// handlers to return.
const handlerExitWait = 5 * time.Second

// run runs one job. When the handler leaves it unsettled, the settle (an
// ack shared with other jobs' acks, usually) runs in its own goroutine so the
// worker can start its next job during the round trip; at most
// 2×Concurrency settles are in flight, after which workers wait.
func (p *Pool) run(base context.Context, t *task) {
	ctx, cancel := context.WithCancelCause(base)
	t.mu.Lock()
	t.cancel = cancel
	canceled := t.canceled
	t.mu.Unlock()
	if canceled { // cancelled while it waited: it never starts
		cancel(conveyor.ErrJobCanceled)
	}
	// After t.cancel is set: either cancelRunning finds it, or this sees
	// the flag it sets first.
	if p.handlersCancelled.Load() {
		cancel(ErrShutdown)
	}
	if t.vt != p.cfg.VisibilityTimeout && p.d.Capabilities().Extend {
		p.extend([]*task{t}, true) // the job's own lease from its start
	}
	// A timeout someone set (the job's, the pool's JobTimeout) is the
	// context's deadline; the default one, which only has to end runaway
	// handlers, is enforced by the watchdog, sparing every job a timer.
	var stop context.CancelFunc = func() {}
	timeout := cmp.Or(t.d.Timeout, p.cfg.JobTimeout)
	if timeout > 0 {
		ctx, stop = context.WithTimeout(ctx, timeout)
	}
	if timeout == 0 {
		timeout = p.defaultTimeout
	}
	start := time.Now()
	t.mu.Lock()
	if !canceled {
		t.started = start // zero for a job cancelled before it ran: its record says so
	}
	if timeout > 0 {
		t.timeout = timeout
		if p.cfg.JobTimeout == 0 && t.d.Timeout == 0 {
			t.expires = start.Add(timeout)
		}
		t.abandonAt = start.Add(timeout + p.cfg.VisibilityTimeout)
	}
	t.mu.Unlock()
	var err error
	if canceled {
		err = conveyor.ErrJobCanceled
	} else {
		err = runjob.Call(ctx, p.h, t.job)
	}
	stop()
	lost := errors.Is(context.Cause(ctx), broker.ErrLeaseLost)
	cancel(nil)
	t.mu.Lock()
	t.returned = true
	canceled = t.canceled
	done := t.released || t.job.Settled()
	handedBack := t.handedBack
	ack := !done && !lost && err == nil
	if ack {
		// Counted under t.mu, where drain looks for returned jobs, so that
		// Run waits for every ack drain leaves to the acker.
		p.acking.Add(1)
	}
	t.mu.Unlock()
	switch {
	case done:
		s := t.job.Settlement()
		if s.Outcome == 0 {
			var err error
			if handedBack != nil {
				<-handedBack // bounded by the hand-back's 5s timeout
				t.mu.Lock()
				err = t.releaseErr
				t.mu.Unlock()
			}
			s = runjob.Settled(conveyor.Settlement{Outcome: conveyor.OutcomeReleased}, err)
		}
		p.finish(t, s)
	case lost:
		p.log.Warn("lease lost; job left to its next delivery", p.jobAttrs(t.d)...)
		p.finish(t, conveyor.Settlement{Outcome: conveyor.OutcomeLeaseLost, Err: broker.ErrLeaseLost})
	case ack:
		p.ackq <- t // the acker batches it with others; blocks when far behind
	default:
		p.settling <- struct{}{}
		go func() {
			defer func() { <-p.settling }()
			if canceled {
				p.finish(t, p.settleCanceled(t))
				return
			}
			p.finish(t, p.settle(t, err))
		}()
	}
}

// maxAckBatch caps the jobs one ack round trip carries.
const maxAckBatch = 256

// acker acks the jobs whose handlers returned nil, taking every job that is
// waiting into one round trip, until stop is closed (after the drain, when no
// job is left).
func (p *Pool) acker(stop <-chan struct{}) {
	batch := make([]*task, 0, maxAckBatch)
	ds := make([]*broker.Delivery, 0, maxAckBatch)
	for {
		select {
		case t := <-p.ackq:
			batch = append(batch[:0], t)
		case <-stop:
			return
		}
	more:
		for len(batch) < maxAckBatch {
			select {
			case t := <-p.ackq:
				batch = append(batch, t)
			default:
				break more
			}
		}
		ds = ds[:0]
		for _, t := range batch {
			t.d.Finish = p.finishRecord(t, "acked", "")
			ds = append(ds, t.d)
		}
		errs := p.ackWithRetries(ds)
		p.mu.Lock()
		for _, t := range batch {
			p.forget(t.d)
		}
		p.mu.Unlock()
		for i, t := range batch {
			conveyor.FinishJob(t.job, runjob.Settled(conveyor.Settlement{Outcome: conveyor.OutcomeAcked}, errs[i]))
			p.wg.Done()
			p.acking.Done()
		}
	}
}

// ackRetryDelays are the pauses before acking again the jobs whose ack
// failed for another reason than a lost lease (Redis briefly out of reach):
// an ack given up on brings the job back after its lease, counted as a crash
// recovery, which should not happen for a blip.
var ackRetryDelays = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second}

// ackWithRetries acks ds, trying again those that failed transiently, and
// returns each one's final outcome.
func (p *Pool) ackWithRetries(ds []*broker.Delivery) []error {
	final := make([]error, len(ds))
	idx := make([]int, len(ds)) // position in ds of each delivery tried
	for i := range idx {
		idx[i] = i
	}
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs := perDelivery(ds, p.cons.Ack(ctx, ds...))
		cancel()
		var (
			again    []*broker.Delivery
			againIdx []int
			lastErr  error
		)
		for i, err := range errs {
			final[idx[i]] = err
			switch {
			case err == nil:
			case errors.Is(err, broker.ErrLeaseLost) || try == len(ackRetryDelays):
				p.log.Warn("ack failed", append(p.jobAttrs(ds[i]), "error", err)...)
			default:
				again = append(again, ds[i])
				againIdx = append(againIdx, idx[i])
				lastErr = err
			}
		}
		if len(again) == 0 {
			return final
		}
		p.log.Info("ack failed; trying again", "jobs", len(again), "error", lastErr, "in", ackRetryDelays[try])
		time.Sleep(ackRetryDelays[try])
		ds, idx = again, againIdx
	}
}

// finish forgets a job the pool is done with and tells the job's OnFinish
// observers how its delivery ended.
func (p *Pool) finish(t *task, s conveyor.Settlement) {
	p.mu.Lock()
	p.forget(t.d)
	p.mu.Unlock()
	conveyor.FinishJob(t.job, s)
	p.wg.Done()
}

// forget drops d from the held jobs; p.mu is held.
func (p *Pool) forget(d *broker.Delivery) {
	if _, ok := p.running[d]; !ok {
		return
	}
	delete(p.running, d)
	if p.lanes != nil {
		p.lanes.done(d.Queue)
	}
	if d.LastChance {
		p.suspects--
		if p.suspects == 0 {
			select {
			case p.suspectDone <- struct{}{}:
			default:
			}
		}
	}
}

// waitSuspects waits until the pool holds no job with recoveries, or for
// one HeartbeatInterval at most: a poison job kills its worker soon, and a
// suspect that just runs long must not stall the pool; false when ctx ended
// first.
func (p *Pool) waitSuspects(ctx context.Context) bool {
	var hold <-chan time.Time
	for {
		p.mu.Lock()
		n := p.suspects
		p.mu.Unlock()
		if n == 0 {
			return true
		}
		if hold == nil {
			t := time.NewTimer(p.cfg.HeartbeatInterval)
			defer t.Stop()
			hold = t.C
		}
		select {
		case <-p.suspectDone:
		case <-hold:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// settle applies the failure policy to a job its handler left unsettled
// and returns how the job ended.
func (p *Pool) settle(t *task, herr error) conveyor.Settlement {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job := t.job
	if herr == nil {
		err := job.Ack(ctx)
		if err != nil {
			p.log.Warn("ack failed", append(p.jobAttrs(t.d), "error", err)...)
		}
		return runjob.Settled(conveyor.Settlement{Outcome: conveyor.OutcomeAcked}, err)
	}
	// The rules retry through the delay timers (the slot is free at once)
	// or discard with the error as the reason.
	dec, err := p.cfg.Retry.Settle(ctx, job, herr)
	if dec.Action == retry.Discard {
		p.log.Warn("job discarded", append(p.jobAttrs(t.d), "error", herr, "why", dec.Why, "max_attempts", dec.MaxAttempts)...)
	} else {
		p.log.Info("job failed; retrying", append(p.jobAttrs(t.d), "error", herr, "in", dec.Delay, "why", dec.Why, "policy", dec.Policy)...)
	}
	if err != nil {
		p.log.Warn("settle failed", append(p.jobAttrs(t.d), "error", err)...)
	}
	if job.Settled() {
		return job.Settlement()
	}
	return runjob.Settled(conveyor.Settlement{}, cmp.Or(err, runjob.ErrLeftUnsettled))
}

func (p *Pool) jobAttrs(d *broker.Delivery) []any {
	if p.cfg.Queue == "" {
		return []any{"queue", d.Queue, "kind", d.Kind, "job_id", d.ID, "attempt", d.Attempt()}
	}
	return []any{"kind", d.Kind, "job_id", d.ID, "attempt", d.Attempt()}
}

// sendAcks acks a batch of deliveries and returns each one's outcome.
func (p *Pool) sendAcks(ctx context.Context, ds []*broker.Delivery) []error {
	return perDelivery(ds, p.cons.Ack(ctx, ds...))
}

// perDelivery spreads a batch error over the deliveries it names; an error
// that names none (the round trip failed) applies to all.
func perDelivery(ds []*broker.Delivery, err error) []error {
	errs := make([]error, len(ds))
	if err == nil {
		return errs
	}
	var named bool
	for _, e := range errlist.Split(err) {
		var de *broker.DeliveryError
		if errors.As(e, &de) {
			for i, d := range ds {
				if d == de.Delivery {
					errs[i] = de.Err
					named = true
				}
			}
		}
	}
	if !named {
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// roomWait is how long fetched jobs may wait in the room while no worker
// takes one (every worker is busy), before they are handed back to the
// queue for another pool; roomTick is how often watchRoom looks; leanFor
// is how long the pool then fetches only for idle workers.
const (
	roomWait = 500 * time.Millisecond
	roomTick = roomWait / 4
	leanFor  = 4 * roomWait
)

// watchRoom, until ctx ends, hands back the jobs waiting in the room when
// no worker has taken one for roomWait while every worker is busy: the
// pool fetched them ahead of its workers (to cover a fetch round trip),
// and its handlers turned out to run long, so another pool with a free
// worker should run them rather than let them wait behind. The jobs go
// back as a release (no attempt counted, at the front of a list queue, at
// the end of a stream) and the fetch loop then fetches only for idle
// workers for leanFor. The watch costs nothing per job: a worker that takes
// a job raises the room's free places, and places that stay as they are
// while jobs wait mean no worker took one.
//
// While jobs wait in the room it also asks the consumer, at most once per
// broker.PauseLag, whether the queue was paused (broker.PauseWatcher, whose
// answer the consumer's fetches share); if so, the room's jobs go back at once and the workers
// hand back any they take, so no job starts more than about twice
// broker.PauseLag after a pause.
func (p *Pool) watchRoom(ctx context.Context, waiting chan *task) {
	tick := time.NewTicker(roomTick)
	defer tick.Stop()
	lastFree, stuck, lean := p.free.Load(), time.Duration(0), time.Duration(0)
	pz, _ := p.cons.(broker.PauseWatcher)
	var asked time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if pz != nil && len(waiting) > 0 && time.Since(asked) >= broker.PauseLag {
			asked = time.Now()
			if paused, err := pz.Paused(ctx); err == nil && paused {
				p.paused.Store(true)
				if ts := drainRoom(waiting); len(ts) > 0 {
					p.giveBack(ts, "handed back waiting jobs: the queue is paused")
				}
				continue
			}
		}
		if p.lean.Load() {
			if lean += roomTick; lean >= leanFor {
				p.lean.Store(false) // fetch ahead again; the watch goes on
				lean = 0
			}
		}
		free := p.free.Load()
		if len(waiting) > 0 && free == lastFree {
			stuck += roomTick
		} else {
			stuck = 0
		}
		lastFree = free
		if stuck < roomWait {
			continue
		}
		stuck = 0
		if ts := drainRoom(waiting); len(ts) > 0 {
			p.lean.Store(true)
			p.shrinkRoom()
			p.giveBack(ts, "handed back jobs that waited behind busy workers")
		}
	}
}

// drainRoom takes every job waiting in the room, without blocking.
func drainRoom(waiting chan *task) []*task {
	var ts []*task
	for len(ts) < cap(waiting) {
		select {
		case t, ok := <-waiting:
			if ok {
				ts = append(ts, t)
				continue
			}
		default:
		}
		break
	}
	return ts
}

// giveBack hands back jobs drainRoom took from the room, freeing their
// places.
func (p *Pool) giveBack(ts []*task, msg string) {
	p.free.Add(int64(len(ts)))
	select { // the fetch loop may wait for these places
	case p.freed <- struct{}{}:
	default:
	}
	p.log.Info(msg, "jobs", len(ts))
	p.handBack(ts)
}
