package timers_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/timers"
)

// seriesEnv is one queue's timer keys under a prefix of the test's own.
type seriesEnv struct {
	t   *testing.T
	ctx context.Context
	rdb redis.UniversalClient
	k   timers.Keys
}

func newSeriesEnv(t *testing.T) *seriesEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &seriesEnv{t: t, ctx: ctx, rdb: redistest.Client(t), k: timers.QueueKeys(redistest.Prefix(t), "q")}
}

// fire runs fire.lua for series at at, kept keep, and fails t unless its
// reply is want.
func (e *seriesEnv) fire(series string, at time.Time, keep time.Duration, want bool) {
	e.t.Helper()
	m := &broker.Message{ID: series + "@" + strconv.FormatInt(at.UnixMilli(), 10), Kind: "k", Queue: "q", RunAt: at}
	ok, err := timers.Fire(e.ctx, e.rdb, e.k, series, m, []byte("stored"), keep)
	if err != nil || ok != want {
		e.t.Fatalf("Fire(%s at %v) = %v, %v; want %v", series, at, ok, err, want)
	}
}

// serverMs is the Redis server's clock, unix ms.
func (e *seriesEnv) serverMs() int64 {
	e.t.Helper()
	now, err := e.rdb.Time(e.ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return now.UnixMilli()
}

// score returns series' score in the index; ok is false when it is not
// there.
func (e *seriesEnv) score(series string) (int64, bool) {
	e.t.Helper()
	s, err := e.rdb.ZScore(e.ctx, e.k.CronSeries, series).Result()
	if err == redis.Nil {
		return 0, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return int64(s), true
}

// wantExpiry fails t unless series is in the index, scored by when its
// record expires: keep after the server's clock read somewhere in
// [from, to].
func (e *seriesEnv) wantExpiry(series string, keep time.Duration, from, to int64) {
	e.t.Helper()
	got, ok := e.score(series)
	if !ok {
		e.t.Fatalf("series %s is not in the index %s", series, e.k.CronSeries)
	}
	if lo, hi := from+keep.Milliseconds(), to+keep.Milliseconds(); got < lo || got > hi {
		e.t.Fatalf("series %s scored %d in the index, want when its record expires, %d to %d", series, got, lo, hi)
	}
	rec, err := e.rdb.PExpireTime(e.ctx, e.k.Series(series)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if d := got - rec.Milliseconds(); d < 0 || d > 5 {
		e.t.Fatalf("series %s scored %d in the index, its record expires at %d: want the same time", series, got, rec.Milliseconds())
	}
}

// TestFireIndexesSeries: a stored fire enters its series in the queue's
// index, scored by when its record expires, and a later fire moves the
// score with the record; a refused fire moves nothing. The index expires
// with its latest record.
func TestFireIndexesSeries(t *testing.T) {
	t.Parallel()
	e := newSeriesEnv(t)
	at := time.UnixMilli(time.Now().Add(20 * time.Second).UnixMilli())

	from := e.serverMs()
	e.fire("nightly", at, time.Hour, true)
	e.wantExpiry("nightly", time.Hour, from, e.serverMs())

	from = e.serverMs()
	e.fire("nightly", at.Add(time.Second), 2*time.Hour, true)
	to := e.serverMs()
	e.wantExpiry("nightly", 2*time.Hour, from, to)
	if ttl, err := e.rdb.PTTL(e.ctx, e.k.CronSeries).Result(); err != nil || ttl <= time.Hour || ttl > 2*time.Hour {
		t.Fatalf("PTTL of the index = %v, %v; want it to expire with the record, in about 2h", ttl, err)
	}

	e.fire("nightly", at, 3*time.Hour, false) // older: refused
	e.wantExpiry("nightly", 2*time.Hour, from, to)
}

// TestFireDropsExpiredSeries: a stored fire removes from the index the
// series whose records expired, and only those: a series with a longer
// keep than the one firing (a monthly series beside an hourly one) stays
// as long as its record does, and the index then expires with it.
func TestFireDropsExpiredSeries(t *testing.T) {
	t.Parallel()
	e := newSeriesEnv(t)
	now := time.UnixMilli(time.Now().UnixMilli())

	e.fire("monthly", now.Add(-10*time.Second), 90*24*time.Hour, true)
	e.fire("short", now, time.Second, true)
	// Wait until the record of short has expired and the server's clock
	// is past its index score: no event says so.
	expires, ok := e.score("short")
	if !ok {
		t.Fatal("series short is not in the index")
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		n, err := e.rdb.Exists(e.ctx, e.k.Series("short")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && e.serverMs() > expires {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record of series short, kept 1s, still there after 10s")
		}
	}
	if _, ok := e.score("short"); !ok {
		t.Fatal("series short left the index before another fire: nothing but fire.lua should trim it")
	}

	e.fire("hourly", now.Add(time.Second), time.Second, true)
	if _, ok := e.score("short"); ok {
		t.Error("series short, whose record expired, is still in the index after another series fired")
	}
	for _, s := range []string{"monthly", "hourly"} {
		if _, ok := e.score(s); !ok {
			t.Errorf("series %s, whose record lives, left the index", s)
		}
	}
	if ttl, err := e.rdb.PTTL(e.ctx, e.k.CronSeries).Result(); err != nil || ttl <= 80*24*time.Hour {
		t.Errorf("PTTL of the index = %v, %v; want it to live as long as the monthly record (90 days), not the hourly fire's keep", ttl, err)
	}
}

// TestListSeries: ListSeries returns the series of the index by name, with
// the last fire each record holds, leaves out a series whose record is
// gone, and stops at broker.MaxCronSeries, keeping those whose records
// expire last.
func TestListSeries(t *testing.T) {
	t.Parallel()
	e := newSeriesEnv(t)
	at := time.UnixMilli(time.Now().Add(20 * time.Second).UnixMilli())
	if s, err := timers.ListSeries(e.ctx, e.rdb, e.k); err != nil || len(s) != 0 {
		t.Fatalf("ListSeries of a queue without series = %+v, %v; want none", s, err)
	}
	// Index order (by expiry) b, c, a; name order a, b, c.
	e.fire("b", at, time.Hour, true)
	e.fire("c", at.Add(-time.Second), 2*time.Hour, true)
	e.fire("a", at.Add(time.Second), 3*time.Hour, true)
	e.fire("gone", at, 4*time.Hour, true)
	if err := e.rdb.Del(e.ctx, e.k.Series("gone")).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := timers.ListSeries(e.ctx, e.rdb, e.k)
	if err != nil {
		t.Fatal(err)
	}
	want := []broker.CronSeries{{Name: "a", LastFire: at.Add(time.Second)}, {Name: "b", LastFire: at}, {Name: "c", LastFire: at.Add(-time.Second)}}
	if len(got) != len(want) {
		t.Fatalf("ListSeries = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || !got[i].LastFire.Equal(want[i].LastFire) {
			t.Fatalf("ListSeries = %+v, want %+v", got, want)
		}
	}

	// Past the cap: the series whose records expire soonest are left out.
	// The layout fire.lua writes, written directly: 1,000 fires would
	// take as many round trips.
	_, err = e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
		far := e.serverMs() + 5*time.Hour.Milliseconds() // after every record above
		for i := range broker.MaxCronSeries {
			n := "s" + strconv.Itoa(i)
			p.ZAdd(e.ctx, e.k.CronSeries, redis.Z{Score: float64(far + int64(i)), Member: n})
			p.Set(e.ctx, e.k.Series(n), at.UnixMilli(), 5*time.Hour)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = timers.ListSeries(e.ctx, e.rdb, e.k)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != broker.MaxCronSeries {
		t.Fatalf("ListSeries over %d series returned %d, want %d", broker.MaxCronSeries+3, len(got), broker.MaxCronSeries)
	}
	for i, s := range got {
		if s.Name == "a" || s.Name == "b" || s.Name == "c" {
			t.Fatalf("ListSeries past the cap kept %s, whose record expires before the 1,000 others'", s.Name)
		}
		if i > 0 && got[i-1].Name >= s.Name {
			t.Fatalf("ListSeries past the cap is not sorted by name at %d: %s, %s", i, got[i-1].Name, s.Name)
		}
	}
}

// TestFireIntoABrokenTimersKeyIsNotRecorded: a fire that cannot store its
// timer (the timers HASH holds another type, written by hand) fails before
// it records the fire: once the key is mended the same fire is stored, not
// refused as one already made.
func TestFireIntoABrokenTimersKeyIsNotRecorded(t *testing.T) {
	t.Parallel()
	e := newSeriesEnv(t)
	if err := e.rdb.Set(e.ctx, e.k.Timers, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(e.serverMs() + 60_000)
	m := &broker.Message{ID: "s@1", Kind: "k", Queue: "q", RunAt: at}
	if ok, err := timers.Fire(e.ctx, e.rdb, e.k, "s", m, []byte("stored"), time.Hour); err == nil {
		t.Fatalf("Fire into a timers key of another type = %v, nil; want its WRONGTYPE", ok)
	}
	if err := e.rdb.Del(e.ctx, e.k.Timers).Err(); err != nil {
		t.Fatal(err)
	}
	e.fire("s", at, time.Hour, true)
}
