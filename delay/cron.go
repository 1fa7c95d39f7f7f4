package delay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/logs"
)

// MaxCronNameLen caps a cron entry's name in bytes, so that a fire ID (the
// name, "@" and the fire time in unix milliseconds) stays within
// broker.MaxNameLen.
const MaxCronNameLen = 100

// Headers every fire carries, besides the entry's own.
const (
	// HeaderCronName holds the name of the entry that fired.
	HeaderCronName = "conveyor-cron-name"
	// HeaderCronFire holds the fire's scheduled time, RFC 3339 in the
	// spec's zone (the delivered message has no RunAt).
	HeaderCronFire = "conveyor-cron-fire"
)

// cronKeepMin is the least time a series' last-fire record outlives its
// latest fire; it is three gaps between fires when that is longer.
const cronKeepMin = 7 * 24 * time.Hour

// MissedPolicy decides what happens to the fires of a series whose time
// passed while no instance stored them (every instance was down, Redis was
// unreachable, or the instances stalled for longer than the lookahead).
type MissedPolicy int

const (
	// MissedRunLatest runs the latest missed fire once, at once, and drops
	// the older ones: a job that was due runs, however long the outage, and
	// never as a burst. The default.
	MissedRunLatest MissedPolicy = iota
	// MissedSkip drops the missed fires; the series resumes with its next
	// fire. A fire at most Lookahead late still runs (late is not missed).
	MissedSkip
)

func (p MissedPolicy) String() string {
	switch p {
	case MissedRunLatest:
		return "run-latest"
	case MissedSkip:
		return "skip"
	}
	return "MissedPolicy(" + strconv.Itoa(int(p)) + ")"
}

// Clock is the time source of a Cron. Tests inject one to run many fires
// without waiting for them.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// WaitUntil returns nil once Now reads t or later (at once if it
	// already does), or ctx.Err() if ctx ends first.
	WaitUntil(ctx context.Context, t time.Time) error
}

// systemClock is the default Clock: the machine's wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// WaitUntil sleeps in steps of at most a minute and compares wall-clock
// readings, so that a wall clock set forward or back (NTP, a resumed
// virtual machine) is noticed within a minute.
func (systemClock) WaitUntil(ctx context.Context, t time.Time) error {
	t = t.Round(0) // wall clock only
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d := time.Until(t)
		if d <= 0 {
			return nil
		}
		timer.Reset(min(d, time.Minute))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// CronConfig configures a Cron. The zero value is valid.
type CronConfig struct {
	// Location is the zone of specs that have no CRON_TZ= (or TZ=) prefix.
	// Defaults to UTC, not time.Local: every instance must compute the same
	// fire times, and the machines they run on may be set to other zones.
	Location *time.Location
	// Queue receives the fires of entries that name no queue. Defaults to
	// "default".
	Queue string
	// Missed decides what happens to fires missed while no instance could
	// store them. Defaults to MissedRunLatest.
	Missed MissedPolicy
	// Lookahead is how long before its time a fire is stored as a timer; a
	// promoter (worker.Pool runs one) moves it to the queue at its time.
	// A fire is also stored when an instance gets to it up to Lookahead
	// late; later than that it was missed and Missed decides. Defaults to
	// 1s; at most 30s, as a fire more than a minute ahead of the Redis
	// server's clock is refused (an instance whose clock runs far ahead
	// must not store a fire that blocks the series until then).
	Lookahead time.Duration
	// Clock is the time source. Defaults to the system clock.
	Clock Clock
	// Logger receives Redis errors (retried), missed fires and broken
	// schedules. Defaults to slog.Default(), warnings and above only.
	Logger *slog.Logger
}

// CronEntry is one named periodic job.
type CronEntry struct {
	// Name identifies the series across instances and restarts: instances
	// that add an entry of the same name and queue share its fires, each of
	// which is enqueued once. 1 to MaxCronNameLen bytes, the rules of queue
	// names (no braces, white space or control characters).
	Name string
	// Spec is a robfig/cron spec: five fields (minute to day of week) or six
	// (seconds first), a descriptor (@hourly, @daily, @every 90s, ...), and
	// an optional CRON_TZ=<zone> (or TZ=<zone>) prefix. docs/cron.md has
	// the details, the time-zone rules and how @every is aligned.
	Spec string
	// Kind routes each fire to a handler.
	Kind string
	// Args is each fire's payload: []byte and json.RawMessage as they are,
	// nil as an empty payload, anything else as its JSON encoding (the
	// rules of conveyor.Request). It is encoded once, by Add.
	Args any
	// Queue receives the fires. Defaults to CronConfig.Queue.
	Queue string
	// Headers go with every fire, with HeaderCronName and HeaderCronFire.
	Headers map[string]string
	// MaxAttempts and Timeout travel with each fire, as in
	// conveyor.EnqueueOptions; 0 means the consumer's default.
	MaxAttempts int
	Timeout     time.Duration
}

// CronStats counts a Cron's work since it was made.
type CronStats struct {
	Stored  int64 // fires this instance enqueued
	Refused int64 // fires another instance (or an earlier run) had enqueued
	Errors  int64 // Redis errors (each retried)
}

// Cron enqueues the fires of named cron specs. Run it in any number of
// processes with the same entries: each fire is enqueued exactly once, by
// whichever instance gets to it first. A fire is enqueued Lookahead before
// its time as a timer with the fire ID FireID(name, time), and the queue's
// promoter makes it ready at its time; whether the fire was already
// enqueued is decided in Redis, in the same atomic script that stores it
// (broker.Timers.EnqueueFire), from the series' last-fire record.
//
// Add and Remove work before and while Run runs.
type Cron struct {
	t     broker.Timers
	cfg   CronConfig
	stats struct{ stored, refused, errors atomic.Int64 }

	mu       sync.Mutex
	entries  map[string]*cronEntry
	running  bool
	stopping bool // Run is waiting for the loops to end
	runCtx   context.Context
	runWG    sync.WaitGroup
}

// cronEntry is an added entry and, while Run runs, its loop.
type cronEntry struct {
	CronEntry
	sched   *schedule
	payload []byte
	stop    context.CancelFunc // nil when no loop runs
	done    chan struct{}
}

// NewCron returns a Cron that enqueues through d. It fails with
// broker.ErrUnsupported when d has no timers (the pubsub driver).
func NewCron(d broker.Driver, cfg *CronConfig) (*Cron, error) {
	if d == nil {
		return nil, errors.New("delay: cron: nil driver")
	}
	t, err := timersOf(d)
	if err != nil {
		return nil, err
	}
	c := &Cron{t: t, entries: make(map[string]*cronEntry)}
	if cfg != nil {
		c.cfg = *cfg
	}
	switch {
	case c.cfg.Lookahead < 0 || c.cfg.Lookahead > 30*time.Second:
		return nil, errors.New("delay: cron: Lookahead must be between 0 and 30s")
	case c.cfg.Missed != MissedRunLatest && c.cfg.Missed != MissedSkip:
		return nil, fmt.Errorf("delay: cron: unknown Missed policy %d", int(c.cfg.Missed))
	}
	if c.cfg.Location == nil {
		c.cfg.Location = time.UTC
	}
	if c.cfg.Queue == "" {
		c.cfg.Queue = "default"
	}
	if err := broker.ValidateQueue(c.cfg.Queue); err != nil {
		return nil, fmt.Errorf("delay: cron: Queue: %w", err)
	}
	if c.cfg.Lookahead == 0 {
		c.cfg.Lookahead = time.Second
	}
	if c.cfg.Clock == nil {
		c.cfg.Clock = systemClock{}
	}
	if c.cfg.Logger == nil {
		c.cfg.Logger = logs.Default()
	}
	return c, nil
}

// FireID is the message ID of the fire of entry name at time at: the name,
// "@", and at in unix milliseconds ("report@1767225600000"). While the fire
// waits for its time, conveyor.Client's Cancel and Reschedule can cancel
// or move it by this ID.
func FireID(name string, at time.Time) string {
	return name + "@" + strconv.FormatInt(at.UnixMilli(), 10)
}

// Add adds an entry. An invalid entry is refused with a *SpecError or an
// *EntryError and nothing is stored; a name the Cron already has is refused
// with ErrEntryExists (Remove it first to change it: the series, and so its
// record of past fires, stays the same). Add stores nothing in Redis; while
// Run runs, the entry starts firing at once.
func (c *Cron) Add(e CronEntry) error {
	ce, err := c.prepare(e)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[e.Name]; ok {
		return fmt.Errorf("delay: cron %q: %w", e.Name, ErrEntryExists)
	}
	c.entries[e.Name] = ce
	if c.running && !c.stopping {
		c.start(ce)
	}
	return nil
}

// prepare validates e and parses its spec.
func (c *Cron) prepare(e CronEntry) (*cronEntry, error) {
	bad := func(field, reason string) error {
		return &EntryError{Name: e.Name, Field: field, Reason: reason}
	}
	if err := broker.ValidateQueue(e.Name); err != nil {
		var qe *broker.QueueNameError
		if errors.As(err, &qe) {
			return nil, bad("Name", qe.Reason)
		}
		return nil, bad("Name", err.Error())
	}
	if len(e.Name) > MaxCronNameLen {
		return nil, bad("Name", "longer than "+strconv.Itoa(MaxCronNameLen)+" bytes")
	}
	if e.Queue == "" {
		e.Queue = c.cfg.Queue
	}
	if err := broker.ValidateQueue(e.Queue); err != nil {
		return nil, bad("Queue", err.Error())
	}
	// The fields the driver checks, on a sample fire.
	m := broker.Message{ID: FireID(e.Name, time.Unix(0, 0)), Kind: e.Kind, Queue: e.Queue,
		MaxAttempts: e.MaxAttempts, Timeout: e.Timeout}
	if err := broker.ValidateMessage(&m); err != nil {
		var me *broker.MessageError
		if errors.As(err, &me) {
			return nil, bad(me.Field, me.Reason)
		}
		return nil, bad("message", err.Error())
	}
	for _, h := range []string{HeaderCronName, HeaderCronFire} {
		if _, ok := e.Headers[h]; ok {
			return nil, bad("Headers", h+" is set by the Cron")
		}
	}
	payload, err := encodeArgs(e.Args)
	if err != nil {
		return nil, bad("Args", err.Error())
	}
	s, err := parseSpec(e.Spec, c.cfg.Location)
	if err == nil {
		_, err = s.next(c.cfg.Clock.Now())
	}
	if err != nil {
		return nil, &SpecError{Name: e.Name, Spec: e.Spec, Err: err}
	}
	e.Headers = maps.Clone(e.Headers)
	return &cronEntry{CronEntry: e, sched: s, payload: payload}, nil
}

// encodeArgs applies conveyor.Request's payload rules.
func encodeArgs(args any) ([]byte, error) {
	switch a := args.(type) {
	case nil:
		return nil, nil
	case []byte:
		return slices.Clone(a), nil
	case json.RawMessage:
		return slices.Clone([]byte(a)), nil
	}
	return json.Marshal(args)
}

// Remove removes the entry name and reports whether the Cron had it. While
// Run runs, the entry's loop has stopped when Remove returns; a fire it
// already stored (at most Lookahead ahead) still runs unless cancelled
// with conveyor.Client's Cancel and FireID. Other instances keep firing the series
// until it is removed from them too.
func (c *Cron) Remove(name string) bool {
	c.mu.Lock()
	e, ok := c.entries[name]
	delete(c.entries, name)
	var stop context.CancelFunc
	var done chan struct{}
	if ok {
		stop, done = e.stop, e.done
	}
	c.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	return ok
}

// Entries returns the entries, ordered by name, with Queue filled in.
func (c *Cron) Entries() []CronEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CronEntry, 0, len(c.entries))
	for _, e := range c.entries {
		ce := e.CronEntry
		ce.Headers = maps.Clone(ce.Headers)
		out = append(out, ce)
	}
	slices.SortFunc(out, func(a, b CronEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Stats returns the Cron's counters.
func (c *Cron) Stats() CronStats {
	return CronStats{Stored: c.stats.stored.Load(), Refused: c.stats.refused.Load(), Errors: c.stats.errors.Load()}
}

// Run enqueues the entries' fires until ctx ends, then returns nil once
// every entry's loop has stopped. Redis errors are logged and retried; they
// never end Run. It fails with ErrCronRunning while another Run of the same
// Cron runs; a Cron may run again after Run returned.
func (c *Cron) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrCronRunning
	}
	c.running, c.runCtx = true, ctx
	for _, e := range c.entries {
		c.start(e)
	}
	c.mu.Unlock()

	<-ctx.Done()

	// Until every loop has ended the Cron still counts as running (a second
	// Run is refused), but starts no loop.
	c.mu.Lock()
	c.stopping = true
	for _, e := range c.entries {
		e.stop() // the loops end on ctx anyway; this releases the contexts
	}
	c.mu.Unlock()
	c.runWG.Wait()
	c.mu.Lock()
	c.running, c.stopping, c.runCtx = false, false, nil
	c.mu.Unlock()
	return nil
}

// start runs e's loop; c.mu is held and c.running is true.
func (c *Cron) start(e *cronEntry) {
	ctx, stop := context.WithCancel(c.runCtx)
	e.stop, e.done = stop, make(chan struct{})
	c.runWG.Add(1)
	go func(done chan struct{}) {
		defer c.runWG.Done()
		defer close(done)
		c.loop(ctx, e)
	}(e.done)
}
