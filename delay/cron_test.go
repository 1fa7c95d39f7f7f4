package delay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/timers"
)

// cronClock is a delay.Clock the test moves by hand.
type cronClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[chan struct{}]time.Time
}

func newCronClock(now time.Time) *cronClock {
	return &cronClock{now: now, waiters: make(map[chan struct{}]time.Time)}
}

func (c *cronClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *cronClock) WaitUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	if !c.now.Before(t) {
		c.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	c.waiters[ch] = t
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiters, ch)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Set moves the clock to now and wakes the waits it ends.
func (c *cronClock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
	for ch, at := range c.waiters {
		if !now.Before(at) {
			close(ch)
			delete(c.waiters, ch)
		}
	}
}

// fireLog consumes a queue (a promoter and a consumer of its own) and
// counts the deliveries of each message ID.
type fireLog struct {
	d     broker.Driver
	queue string

	mu      sync.Mutex
	count   map[string]int
	msgs    map[string]broker.Message
	changed chan struct{} // closed and replaced on every delivery
}

func collectFires(t *testing.T, td drivertest.Driver, prefix, queue string) *fireLog {
	t.Helper()
	d := td.Must(t, redistest.NewClient(t), prefix)
	l := &fireLog{d: d, queue: queue, count: map[string]int{}, msgs: map[string]broker.Message{}, changed: make(chan struct{})}
	p, err := delay.NewPromoter(d, queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := d.Open(context.Background(), queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cons.Close(context.Background()) }) // after the loop below stopped
	drivertest.Background(t, p.Run)
	drivertest.Background(t, func(ctx context.Context) error {
		for {
			ds, err := cons.Fetch(ctx, 100)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			l.mu.Lock()
			for _, dl := range ds {
				l.count[dl.ID]++
				l.msgs[dl.ID] = dl.Message
			}
			close(l.changed)
			l.changed = make(chan struct{})
			l.mu.Unlock()
			if err := cons.Ack(ctx, ds...); err != nil && ctx.Err() == nil {
				return err
			}
		}
	})
	return l
}

// waitFor waits until every id was delivered.
func (l *fireLog) waitFor(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		var missing []string
		for _, id := range ids {
			if l.count[id] == 0 {
				missing = append(missing, id)
			}
		}
		changed := l.changed
		l.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("not delivered within 30s: %v", missing)
		}
	}
}

// waitFires waits until n distinct fires of series name were delivered.
func (l *fireLog) waitFires(t *testing.T, name string, n int) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		got := 0
		for id := range l.count {
			if strings.HasPrefix(id, name+"@") {
				got++
			}
		}
		changed := l.changed
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%d fires of %s delivered within 30s, want %d", got, name, n)
		}
	}
}

// drain waits until everything stored in the queue so far was delivered:
// the pending timers, then a marker enqueued behind them (each driver
// delivers one consumer's queue in order). Call it once no Cron runs.
func (l *fireLog) drain(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pending, _, err := l.d.(broker.Timers).PendingTimers(ctx, l.queue, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range pending {
		ids = append(ids, m.ID)
	}
	l.waitFor(t, ids...)
	var b [6]byte
	_, _ = rand.Read(b[:])
	marker := "marker-" + hex.EncodeToString(b[:])
	if err := l.d.Enqueue(ctx, []*broker.Message{{ID: marker, Kind: "marker", Queue: l.queue}}); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, marker)
}

// fires returns how often each fire of series name was delivered, keyed by
// fire time, and fails t on a delivered ID that is neither a fire of a name
// in names nor a marker.
func (l *fireLog) fires(t *testing.T, name string, names ...string) map[time.Time]int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[time.Time]int{}
	for id, n := range l.count {
		series, ms, ok := strings.Cut(id, "@")
		if !ok {
			if !strings.HasPrefix(id, "marker-") {
				t.Errorf("delivered %q, not a fire", id)
			}
			continue
		}
		if series != name {
			if !slices.Contains(names, series) {
				t.Errorf("delivered %q, a fire of an unknown series", id)
			}
			continue
		}
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			t.Errorf("fire ID %q: %v", id, err)
			continue
		}
		out[time.UnixMilli(v).UTC()] += n
	}
	return out
}

// message returns the delivered message id.
func (l *fireLog) message(id string) (broker.Message, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.msgs[id]
	return m, ok
}

// checkFires fails t unless the fires of name delivered are exactly want,
// each once.
func checkFires(t *testing.T, got map[time.Time]int, want []time.Time) {
	t.Helper()
	wanted := map[time.Time]bool{}
	for _, at := range want {
		wanted[at.UTC()] = true
		if n := got[at.UTC()]; n != 1 {
			t.Errorf("fire %s delivered %d times, want 1", at.UTC().Format(time.RFC3339), n)
		}
	}
	var extra []string
	for at, n := range got {
		if !wanted[at] {
			extra = append(extra, at.Format(time.RFC3339)+" x"+strconv.Itoa(n))
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		t.Errorf("fires delivered that should not have been: %v", extra)
	}
}

// seconds returns t0 + s seconds for each s in [from, to].
func seconds(t0 time.Time, from, to int) []time.Time {
	var out []time.Time
	for s := from; s <= to; s++ {
		out = append(out, t0.Add(time.Duration(s)*time.Second))
	}
	return out
}

// cronInstance is one Cron, on a driver (and a client) of its own, running
// until stop is called.
type cronInstance struct {
	c    *delay.Cron
	stop func()
}

func startCron(t *testing.T, td drivertest.Driver, prefix string, cfg *delay.CronConfig, entries ...delay.CronEntry) *cronInstance {
	t.Helper()
	c, err := delay.NewCron(td.Must(t, redistest.NewClient(t), prefix), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := c.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	return &cronInstance{c: c, stop: drivertest.Background(t, c.Run)}
}

// TestCronOneFirePerSecond: five instances (each its own driver and
// client, one key prefix) fire a per-second spec for 30 seconds of an
// injected clock. Every fire is delivered exactly once, also while two
// instances are stopped and replaced, and across a stretch with every
// instance down (fires 22-23 missed; the default policy runs the latest,
// 24, once). The instances contend for every fire (Refused > 0) and the
// ones they stored add up to the fires delivered.
func TestCronOneFirePerSecond(t *testing.T) {
	t.Parallel()
	for _, td := range timerDrivers {
		t.Run(td.Name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			const queue = "cron"
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := newCronClock(t0)
			log := collectFires(t, td, prefix, queue)
			entry := delay.CronEntry{Name: "tick", Spec: "* * * * * *", Kind: "tick", Queue: queue,
				Args: map[string]int{"n": 1}, Headers: map[string]string{"h": "v"}}
			cfg := &delay.CronConfig{Clock: clock}
			var all []*delay.Cron
			start := func() *cronInstance {
				in := startCron(t, td, prefix, cfg, entry)
				all = append(all, in.c)
				return in
			}
			id := func(s int) string { return delay.FireID("tick", t0.Add(time.Duration(s)*time.Second)) }

			insts := make([]*cronInstance, 5)
			for i := range insts {
				insts[i] = start()
			}
			log.waitFor(t, id(1)) // a new series starts with the first fire after now
			running := true
			for s := 1; s <= 30; s++ {
				clock.Set(t0.Add(time.Duration(s) * time.Second))
				if running {
					log.waitFor(t, id(s+1)) // stored a Lookahead (1s) ahead
				}
				switch s {
				case 10: // two instances go away...
					insts[0].stop()
					insts[1].stop()
				case 15: // ...and come back as new ones
					insts[0], insts[1] = start(), start()
				case 20: // all go away: 22 and 23 pass unstored
					for _, in := range insts {
						in.stop()
					}
					running = false
				case 24: // back at 24: the latest missed fire (24) once, then 25
					for i := range insts {
						insts[i] = start()
					}
					running = true
					log.waitFor(t, id(24), id(25))
				}
			}
			for _, in := range insts {
				in.stop()
			}
			log.drain(t)

			want := append(seconds(t0, 1, 21), seconds(t0, 24, 31)...)
			checkFires(t, log.fires(t, "tick"), want)
			var stored, refused int64
			for _, c := range all {
				st := c.Stats()
				stored += st.Stored
				refused += st.Refused
				if st.Errors != 0 {
					t.Errorf("a Cron counted %d Redis errors", st.Errors)
				}
			}
			if stored != int64(len(want)) {
				t.Errorf("the instances stored %d fires, want %d", stored, len(want))
			}
			if refused == 0 {
				t.Errorf("no instance was ever refused a fire: the instances did not contend")
			}
			t.Logf("%d fires; %d refused attempts", stored, refused)

			m, ok := log.message(id(7))
			if !ok {
				t.Fatal("fire 7 not delivered")
			}
			if m.Kind != "tick" || string(m.Payload) != `{"n":1}` || m.Headers["h"] != "v" ||
				m.Headers[delay.HeaderCronName] != "tick" || m.Headers[delay.HeaderCronFire] != "2026-01-01T00:00:07Z" {
				t.Errorf("fire 7: kind %q, payload %q, headers %v", m.Kind, m.Payload, m.Headers)
			}
			checkRecordTTL(t, td, prefix, queue, "tick", 7*24*time.Hour)
		})
	}
}

// checkRecordTTL fails t unless the series' last-fire record lives about
// keep (a few seconds less, for the test's own duration).
func checkRecordTTL(t *testing.T, td drivertest.Driver, prefix, queue, series string, keep time.Duration) {
	t.Helper()
	// A split queue keeps the record in the partition its series routes to.
	ttl := time.Duration(-2)
	for _, p := range td.Parts(queue) {
		d, err := redistest.Client(t).PTTL(context.Background(), timers.QueueKeys(prefix, p).Series(series)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if d != -2 {
			ttl = d
			break
		}
	}
	if ttl > keep || ttl < keep-time.Minute {
		t.Errorf("last-fire record of %s lives %v, want about %v", series, ttl, keep)
	}
}

// TestCronMissedFires: a per-minute series last fired at T; every instance
// is down until T+10m30s. MissedRunLatest stores exactly one fire, the
// latest that passed (T+10m), at once; MissedSkip stores none. Both then
// carry on with T+11m, and both store a fire found only half a second late
// (late within the Lookahead is not missed).
func TestCronMissedFires(t *testing.T) {
	t.Parallel()
	td := timerDrivers[0]
	for _, policy := range []delay.MissedPolicy{delay.MissedRunLatest, delay.MissedSkip} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			const queue = "cron"
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			at := func(d time.Duration) time.Time { return t0.Add(d) }
			clock := newCronClock(at(-30 * time.Second))
			log := collectFires(t, td, prefix, queue)
			entry := delay.CronEntry{Name: "minutely", Spec: "* * * * *", Kind: "k", Queue: queue}
			cfg := &delay.CronConfig{Clock: clock, Missed: policy}
			id := func(d time.Duration) string { return delay.FireID("minutely", at(d)) }

			in := startCron(t, td, prefix, cfg, entry)
			clock.Set(at(-time.Second))
			log.waitFor(t, id(0))
			in.stop()

			clock.Set(at(10*time.Minute + 30*time.Second))
			in = startCron(t, td, prefix, cfg, entry)
			if policy == delay.MissedRunLatest {
				log.waitFor(t, id(10*time.Minute))
			}
			clock.Set(at(11*time.Minute - time.Second))
			log.waitFor(t, id(11*time.Minute))
			in.stop()

			clock.Set(at(12*time.Minute + 500*time.Millisecond))
			in = startCron(t, td, prefix, cfg, entry)
			log.waitFor(t, id(12*time.Minute))
			in.stop()
			log.drain(t)

			want := []time.Time{at(0), at(11 * time.Minute), at(12 * time.Minute)}
			if policy == delay.MissedRunLatest {
				want = append(want, at(10*time.Minute))
			}
			checkFires(t, log.fires(t, "minutely"), want)
			last, ok, err := td.Must(t, redistest.Client(t), prefix).(broker.Timers).LastFire(context.Background(), queue, "minutely")
			if err != nil || !ok || !last.Equal(at(12*time.Minute)) {
				t.Errorf("LastFire = %v, %v, %v; want %v", last, ok, err, at(12*time.Minute))
			}
		})
	}
}

// TestCronAddRemoveWhileRunning: an entry added to a running Cron starts
// firing at once; a removed one stops (Remove returns after its loop
// ended, so nothing after its last stored fire); re-adding it resumes the
// series from its record (the fire that passed meanwhile runs, as
// MissedRunLatest says).
func TestCronAddRemoveWhileRunning(t *testing.T) {
	t.Parallel()
	td := timerDrivers[0]
	prefix := redistest.Prefix(t)
	const queue = "cron"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newCronClock(t0)
	log := collectFires(t, td, prefix, queue)
	a := delay.CronEntry{Name: "a", Spec: "* * * * * *", Kind: "k", Queue: queue}
	b := delay.CronEntry{Name: "b", Spec: "* * * * * *", Kind: "k", Queue: queue}
	in := startCron(t, td, prefix, &delay.CronConfig{Clock: clock}, a)
	c := in.c
	fire := func(name string, s int) string { return delay.FireID(name, t0.Add(time.Duration(s)*time.Second)) }
	set := func(s int) { clock.Set(t0.Add(time.Duration(s) * time.Second)) }

	log.waitFor(t, fire("a", 1))
	set(1)
	log.waitFor(t, fire("a", 2))
	if err := c.Add(b); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, fire("b", 2))
	set(2)
	log.waitFor(t, fire("a", 3), fire("b", 3))
	if !c.Remove("a") {
		t.Fatal("Remove(a) = false")
	}
	if got := c.Entries(); len(got) != 1 || got[0].Name != "b" || got[0].Queue != queue {
		t.Fatalf("Entries() = %+v, want only b", got)
	}
	if c.Remove("a") || c.Remove("nope") {
		t.Error("Remove of a missing entry returned true")
	}
	if err := c.Add(b); !errors.Is(err, delay.ErrEntryExists) {
		t.Errorf("Add(b) again: %v, want ErrEntryExists", err)
	}
	set(3)
	log.waitFor(t, fire("b", 4))
	set(4)
	log.waitFor(t, fire("b", 5))
	// Nothing of a's was stored since Remove returned: its record still
	// says 3. Re-added (with another kind, to tell whose fires these are),
	// it resumes there; 4 passed meanwhile and runs, as MissedRunLatest says.
	last, found, err := td.Must(t, redistest.Client(t), prefix).(broker.Timers).LastFire(context.Background(), queue, "a")
	if err != nil || !found || !last.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("LastFire(a) after Remove = %v, %v, %v; want %v", last, found, err, t0.Add(3*time.Second))
	}
	a.Kind = "k2"
	if err := c.Add(a); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, fire("a", 4), fire("a", 5))
	for _, s := range []int{4, 5} {
		if m, _ := log.message(fire("a", s)); m.Kind != "k2" {
			t.Errorf("fire a@%d has kind %q: stored by the removed entry", s, m.Kind)
		}
	}
	in.stop()
	if err := c.Run(canceled()); err != nil { // a stopped Cron runs again
		t.Errorf("second Run: %v", err)
	}
	log.drain(t)
	checkFires(t, log.fires(t, "a", "b"), seconds(t0, 1, 5))
	checkFires(t, log.fires(t, "b", "a"), seconds(t0, 2, 5))
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestCronRunTwice: a second Run of a running Cron fails at once.
func TestCronRunTwice(t *testing.T) {
	t.Parallel()
	td := timerDrivers[0]
	prefix := redistest.Prefix(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	log := collectFires(t, td, prefix, "cron")
	in := startCron(t, td, prefix, &delay.CronConfig{Clock: newCronClock(t0), Queue: "cron"},
		delay.CronEntry{Name: "e", Spec: "* * * * * *", Kind: "k"})
	log.waitFor(t, delay.FireID("e", t0.Add(time.Second))) // the first Run runs
	if err := in.c.Run(context.Background()); !errors.Is(err, delay.ErrCronRunning) {
		t.Fatalf("second Run = %v, want ErrCronRunning", err)
	}
	in.stop()
}

// TestCronInvalidEntries: every bad spec or field is refused at Add with a
// typed error, the Cron keeps no entry for it, and a Run afterwards stores
// nothing but the one valid entry's fire and record.
func TestCronInvalidEntries(t *testing.T) {
	t.Parallel()
	td := timerDrivers[0]
	prefix := redistest.Prefix(t)
	const queue = "cron"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := newCronClock(t0)
	c, err := delay.NewCron(td.Must(t, redistest.NewClient(t), prefix), &delay.CronConfig{Clock: clock, Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	ok := delay.CronEntry{Name: "ok", Spec: "* * * * * *", Kind: "k"}

	badSpecs := []string{
		"* * *",                       // too few fields
		"* * * * * * *",               // too many
		"61 * * * * *",                // second out of range
		"* 24 * * *",                  // hour out of range
		"*/0 * * * *",                 // zero step
		"CRON_TZ=Not/AZone * * * * *", // unknown zone
		"",                            // empty
		"   ",                         // blank
		"TZ=UTC",                      // robfig panics on a prefix with nothing after it
		"CRON_TZ=America/New_York",    // the same
		"@bogus",                      // unknown descriptor
		"@every 500ms",                // robfig would round it up to 1s
		"@every -5s",                  // and this one too
		"@every 1500ms",               // and drop the half second here
		"@every forever",              // not a duration
		"0 0 30 2 *",                  // 30 February: never fires
	}
	for _, spec := range badSpecs {
		e := ok
		e.Name, e.Spec = "bad", spec
		err := c.Add(e)
		var se *delay.SpecError
		if !errors.As(err, &se) || !errors.Is(err, delay.ErrInvalidSpec) || se.Spec != spec || se.Name != "bad" || se.Err == nil {
			t.Errorf("Add(spec %q) = %v, want a *SpecError", spec, err)
		} else if !strings.Contains(err.Error(), strconv.Quote(spec)) {
			t.Errorf("Add(spec %q): error %q does not quote the spec", spec, err)
		}
	}

	badFields := []struct {
		field string
		edit  func(*delay.CronEntry)
	}{
		{"Name", func(e *delay.CronEntry) { e.Name = "" }},
		{"Name", func(e *delay.CronEntry) { e.Name = "a{b}" }},
		{"Name", func(e *delay.CronEntry) { e.Name = "a b" }},
		{"Name", func(e *delay.CronEntry) { e.Name = "a\x00" }},
		{"Name", func(e *delay.CronEntry) { e.Name = strings.Repeat("n", delay.MaxCronNameLen+1) }},
		{"Name", func(e *delay.CronEntry) { e.Name = strings.Repeat("n", broker.MaxNameLen+1) }},
		{"Kind", func(e *delay.CronEntry) { e.Kind = "" }},
		{"Kind", func(e *delay.CronEntry) { e.Kind = "k{x}" }},
		{"Queue", func(e *delay.CronEntry) { e.Queue = "q{x}" }},
		{"counters", func(e *delay.CronEntry) { e.MaxAttempts = -1 }},
		{"counters", func(e *delay.CronEntry) { e.Timeout = -time.Second }},
		{"Args", func(e *delay.CronEntry) { e.Args = make(chan int) }},
		{"Headers", func(e *delay.CronEntry) { e.Headers = map[string]string{delay.HeaderCronFire: "x"} }},
	}
	for _, bf := range badFields {
		e := ok
		e.Name = "bad"
		bf.edit(&e)
		err := c.Add(e)
		var ee *delay.EntryError
		if !errors.As(err, &ee) || !errors.Is(err, delay.ErrInvalidEntry) || ee.Field != bf.field || ee.Name != e.Name {
			t.Errorf("Add(%s %+v) = %v, want an *EntryError on %s", bf.field, e, err, bf.field)
		}
	}
	longest := ok
	longest.Name = strings.Repeat("n", delay.MaxCronNameLen)
	if err := c.Add(longest); err != nil {
		t.Errorf("Add(name of %d bytes): %v", delay.MaxCronNameLen, err)
	}
	if !c.Remove(longest.Name) {
		t.Error("Remove(longest) = false")
	}
	if got := c.Entries(); len(got) != 0 {
		t.Fatalf("Entries() after refused Adds = %+v", got)
	}

	if err := c.Add(ok); err != nil {
		t.Fatal(err)
	}
	log := collectFires(t, td, prefix, queue)
	stop := drivertest.Background(t, c.Run)
	log.waitFor(t, delay.FireID("ok", t0.Add(time.Second)))
	stop()
	log.drain(t)
	checkFires(t, log.fires(t, "ok"), seconds(t0, 1, 1))
	series := timers.QueueKeys(prefix, queue).Series("ok")
	for _, k := range redistest.Keys(t, redistest.Client(t), prefix) {
		if strings.Contains(k, ":cron:") && k != series {
			t.Errorf("key %s stored for a refused entry", k)
		}
	}
}

// TestNewCronConfig: bad configs and a driver without timers are refused.
func TestNewCronConfig(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d := timerDrivers[0].Must(t, rdb, prefix)
	for _, cfg := range []*delay.CronConfig{
		{Lookahead: -time.Second},
		{Missed: delay.MissedPolicy(7)},
		{Queue: "a{b}"},
	} {
		if _, err := delay.NewCron(d, cfg); err == nil {
			t.Errorf("NewCron(%+v) = nil error", cfg)
		}
	}
	if _, err := delay.NewCron(nil, nil); err == nil {
		t.Error("NewCron(nil driver) = nil error")
	}
	ps, err := pubsub.New(rdb, &pubsub.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delay.NewCron(ps, nil); !errors.Is(err, broker.ErrUnsupported) {
		t.Errorf("NewCron(pubsub) = %v, want ErrUnsupported", err)
	}
	if s := delay.MissedPolicy(7).String(); s != "MissedPolicy(7)" {
		t.Errorf("String() = %q", s)
	}
}

// TestCronRedisDown: with its client closed, a Cron logs and counts the
// errors and keeps running (Run does not end) until its context does.
func TestCronRedisDown(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	opts, _, _ := redistest.Options()
	rdb := redis.NewUniversalClient(opts)
	_ = rdb.Close()
	c, err := delay.NewCron(timerDrivers[0].Must(t, rdb, prefix), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(delay.CronEntry{Name: "e", Spec: "* * * * * *", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for c.Stats().Errors < 3 {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v while its context was live", err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d errors counted in 10s, want 3", c.Stats().Errors)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if st := c.Stats(); st.Stored != 0 {
		t.Errorf("stored %d fires with Redis down", st.Stored)
	}
}
