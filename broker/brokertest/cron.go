package brokertest

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// testCronFireOnce proves EnqueueFire stores each fire of a series once:
// of five instances firing the same time at once exactly one stores it, an
// older fire afterwards is refused (fires only move forward), a newer one is
// stored, LastFire reports the latest, and a fire in the past is due at
// once. The last-fire record must expire: it is the one thing this test
// leaves behind (its timers are cancelled or delivered), so instead of
// AssertNoKeys it checks that every key left has a TTL no longer than keep.
func testCronFireOnce(t *testing.T, e *env) {
	const q, series, instances, keep = "cron-fire", "every-minute", 5, time.Hour
	tm := timersOf(t, e.d)
	ctx := Context(t, 30*time.Second)
	fire := func(series string, at time.Time, i int) *broker.Message {
		m := NewMessage(q, i)
		m.ID = series + "@" + strconv.FormatInt(at.UnixMilli(), 10)
		m.RunAt = at
		return m
	}
	fireOnce := func(m *broker.Message, series string, want bool) {
		t.Helper()
		ok, err := tm.EnqueueFire(ctx, series, m, keep)
		if err != nil {
			t.Fatalf("EnqueueFire(%q, %s): %v", series, m.ID, err)
		}
		if ok != want {
			t.Fatalf("EnqueueFire(%q, %s) = %v, want %v", series, m.ID, ok, want)
		}
	}
	lastFire := func(series string, want time.Time) {
		t.Helper()
		at, ok, err := tm.LastFire(ctx, q, series)
		if err != nil {
			t.Fatalf("LastFire(%q): %v", series, err)
		}
		if want.IsZero() {
			if ok {
				t.Fatalf("LastFire(%q) = %v, want none", series, at)
			}
			return
		}
		if !ok || !at.Equal(want) {
			t.Fatalf("LastFire(%q) = %v, %v; want %v, true", series, at, ok, want)
		}
	}

	lastFire(series, time.Time{})
	at := time.UnixMilli(time.Now().Add(30 * time.Second).UnixMilli())
	start := make(chan struct{})
	stored := make(chan bool, instances)
	var wg sync.WaitGroup
	for i := range instances {
		wg.Go(func() {
			<-start
			ok, err := tm.EnqueueFire(ctx, series, fire(series, at, i), keep)
			if err != nil {
				t.Errorf("instance %d: EnqueueFire: %v", i, err)
			}
			stored <- ok
		})
	}
	close(start)
	wg.Wait()
	close(stored)
	wins := 0
	for ok := range stored {
		if ok {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d of %d instances firing %q at %v stored the fire, want exactly 1", wins, instances, series, at)
	}
	lastFire(series, at)
	fireOnce(fire(series, at.Add(-time.Minute), 10), series, false)
	lastFire(series, at)
	next := at.Add(time.Second)
	fireOnce(fire(series, next, 11), series, true)
	lastFire(series, next)
	// An instance whose clock runs ahead must not store a fire that would
	// make the record refuse the series' fires until then.
	far := fire(series, time.Now().Add(2*time.Minute), 12)
	if ok, err := tm.EnqueueFire(ctx, series, far, time.Hour); err == nil || ok {
		t.Fatalf("EnqueueFire two minutes ahead of the server's clock: %v, %v; want an error", ok, err)
	}
	lastFire(series, next)

	ms, total := pending(t, tm, q)
	if total != 2 || len(ms) != 2 || ms[0].ID != fire(series, at, 0).ID || !ms[0].RunAt.Equal(at) ||
		ms[1].ID != fire(series, next, 0).ID || !ms[1].RunAt.Equal(next) {
		var got []string
		for _, m := range ms {
			got = append(got, m.ID+" at "+m.RunAt.String())
		}
		t.Fatalf("pending fires %q (total %d), want %s at %v and %s at %v",
			got, total, fire(series, at, 0).ID, at, fire(series, next, 0).ID, next)
	}
	cancelTimer(t, tm, q, ms[0].ID, true)
	cancelTimer(t, tm, q, ms[1].ID, true)

	// A fire whose time has passed (an instance a little late) is due at once.
	c := Open(t, e.d, q, nil)
	past := fire("past", time.UnixMilli(time.Now().Add(-time.Minute).UnixMilli()), 20)
	fireOnce(past, "past", true)
	promoteDue(t, tm, q, 1)
	d := FetchOne(t, c, 5*time.Second)
	if d.ID != past.ID {
		t.Fatalf("fetched %s, want the past fire %s", d.ID, past.ID)
	}
	checkSameMessage(t, &d.Message, past)
	if err := c.Ack(ctx, d); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	lastFire("past", past.RunAt)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A fire is a timer: one in a FIFO group is refused (invalid, or
	// unsupported by a driver without groups), not stored to run outside
	// its group's order.
	grouped := fire("grouped", time.Now(), 99)
	grouped.Group = "g"
	if ok, err := tm.EnqueueFire(ctx, "grouped", grouped, keep); ok || !(errors.Is(err, broker.ErrInvalidMessage) || errors.Is(err, broker.ErrUnsupported)) {
		t.Fatalf("EnqueueFire of a grouped message = %v, %v; want broker.ErrInvalidMessage or broker.ErrUnsupported", ok, err)
	}

	rdb := Client(t)
	for _, k := range redistest.Keys(t, rdb, e.prefix) {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		if ttl <= 0 || ttl > keep {
			t.Errorf("key %s left with TTL %v, want every key left (the last-fire records) to expire within %v", k, ttl, keep)
		}
	}
}

// testCronSeries proves CronLister.CronSeries lists the series of a queue
// that stored a fire, sorted by name whatever the order of their fires and
// records, each with its latest stored fire (a refused older fire changes
// nothing), not the series of another queue, and not a series whose
// record expired. Skipped for a driver without broker.CronLister.
func testCronSeries(t *testing.T, e *env) {
	const q, other = "cron-series", "cron-series-other"
	l, ok := e.d.(broker.CronLister)
	if !ok {
		t.Skipf("driver %T does not implement broker.CronLister", e.d)
	}
	tm := timersOf(t, e.d)
	ctx := Context(t, 30*time.Second)
	fire := func(queue, series string, at time.Time, keep time.Duration, want bool) {
		t.Helper()
		m := NewMessage(queue, 0)
		m.ID = series + "@" + strconv.FormatInt(at.UnixMilli(), 10)
		m.RunAt = at
		ok, err := tm.EnqueueFire(ctx, series, m, keep)
		if err != nil || ok != want {
			t.Fatalf("EnqueueFire(%q, %s) = %v, %v; want %v", series, m.ID, ok, err, want)
		}
	}
	list := func(queue string, want ...broker.CronSeries) {
		t.Helper()
		got, err := l.CronSeries(ctx, queue)
		if err != nil {
			t.Fatalf("CronSeries(%q): %v", queue, err)
		}
		same := len(got) == len(want)
		for i := 0; same && i < len(got); i++ {
			same = got[i].Name == want[i].Name && got[i].LastFire.Equal(want[i].LastFire)
		}
		if !same {
			t.Fatalf("CronSeries(%q) = %+v, want %+v", queue, got, want)
		}
	}

	list(q)
	t0 := time.UnixMilli(time.Now().Add(20 * time.Second).UnixMilli())
	// Fired in an order other than their names', with records that expire
	// in yet another order: the listing is by name all the same.
	fire(q, "c", t0, time.Hour, true)
	fire(q, "a", t0.Add(time.Second), 2*time.Hour, true)
	fire(q, "b", t0.Add(-time.Second), 3*time.Hour, true)
	fire(other, "d", t0, time.Hour, true)
	list(q, broker.CronSeries{Name: "a", LastFire: t0.Add(time.Second)}, broker.CronSeries{Name: "b", LastFire: t0.Add(-time.Second)},
		broker.CronSeries{Name: "c", LastFire: t0})
	list(other, broker.CronSeries{Name: "d", LastFire: t0})

	// A later fire moves the series on; an older one is refused and moves
	// nothing.
	fire(q, "c", t0.Add(5*time.Second), time.Hour, true)
	fire(q, "a", t0, time.Hour, false)
	list(q, broker.CronSeries{Name: "a", LastFire: t0.Add(time.Second)}, broker.CronSeries{Name: "b", LastFire: t0.Add(-time.Second)},
		broker.CronSeries{Name: "c", LastFire: t0.Add(5 * time.Second)})

	// A series whose record expired is no longer listed, whether or not
	// another series fired since. keep rounds up to a second.
	// Its expiry is announced nowhere: LastFire is asked until it says so.
	fire(other, "short", t0, time.Millisecond, true)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, ok, err := tm.LastFire(ctx, other, "short")
		if err != nil {
			t.Fatalf("LastFire(short): %v", err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record of series short, kept 1s, still there after 10s")
		}
		<-tick.C
	}
	list(other, broker.CronSeries{Name: "d", LastFire: t0})

	var qe *broker.QueueNameError
	if _, err := l.CronSeries(ctx, "a{b}"); !errors.As(err, &qe) {
		t.Fatalf("CronSeries(%q): %v, want a *broker.QueueNameError", "a{b}", err)
	}
}
