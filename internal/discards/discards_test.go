package discards

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// pushScript runs lib.lua's discard_push with the time given, as the
// drivers' discarding scripts do with the server's: retention can be tested
// at any "now" without waiting.
var pushScript = script.New("discards.test.push", Lib+`
discard_push(discard_list(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5])
return redis.call('LLEN', KEYS[1])
`)

type fixture struct {
	rdb redis.UniversalClient
	k   Keys
	x   *Keeper
	to  timers.Target
}

func newFixture(t *testing.T, rdb redis.UniversalClient, prefix string, stream bool, r Retention) *fixture {
	t.Helper()
	const q = "q"
	k := QueueKeys(prefix, q)
	to := timers.Target{Key: keys.Queue(prefix, q).Part("ready")}
	if stream {
		to = timers.Target{Key: keys.Queue(prefix, q).Part("stream"), Stream: true, Group: "g"}
	}
	x := &Keeper{Name: "test", Client: rdb, Retention: r,
		Keys: func(string) (Keys, timers.Target) { return k, to }}
	return &fixture{rdb: rdb, k: k, x: x, to: to}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func msg(i int, kind string) *broker.Message {
	return &broker.Message{ID: fmt.Sprintf("m-%05d", i), Kind: kind, Queue: "q", Payload: []byte(fmt.Sprint("p", i)),
		Headers: map[string]string{"h": "v"}, MaxAttempts: 5, EnqueuedAt: time.UnixMilli(1_700_000_000_000)}
}

// record is m's discard record at ms with reason; m has had 3 deliveries,
// 2 failed attempts and 1 recovery.
func record(ms int64, reason string, m *broker.Message) string {
	c := *m
	c.Retries, c.Recoveries = 2, 1
	return fmt.Sprintf("d1,%d,%d:%s%s", ms, len(reason), reason, codec.Encode(&c, 3))
}

// write adds recs, oldest first, to the newest end of the list.
func (f *fixture) write(t *testing.T, recs ...string) {
	t.Helper()
	for len(recs) > 0 {
		n := min(len(recs), 1000)
		args := make([]any, n)
		for i, r := range recs[:n] {
			args[i] = r
		}
		if err := f.rdb.LPush(ctxT(t), f.k.Dead, args...).Err(); err != nil {
			t.Fatal(err)
		}
		recs = recs[n:]
	}
}

func (f *fixture) push(t *testing.T, r Retention, now int64, reason string, m *broker.Message) int64 {
	t.Helper()
	v, err := pushScript.Run(ctxT(t), f.rdb, []string{f.k.Dead, f.k.Dropped, f.k.Expired}, r.Max, r.AgeArg(), now, reason, codec.Encode(m, 1))
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return v.(int64)
}

func (f *fixture) counters(t *testing.T) (dropped, expired int64) {
	t.Helper()
	get := func(k string) int64 {
		n, err := f.rdb.Get(ctxT(t), k).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return n
	}
	return get(f.k.Dropped), get(f.k.Expired)
}

// ids reads the list's message IDs, newest first, "?" for unreadable ones.
func (f *fixture) ids(t *testing.T) []string {
	t.Helper()
	recs, err := f.rdb.LRange(ctxT(t), f.k.Dead, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = "?"
		if d := Decode("q", []byte(r)); d.Raw == nil {
			out[i] = d.ID
		}
	}
	return out
}

func realRedis(t *testing.T, stream bool, r Retention) *fixture {
	t.Parallel()
	return newFixture(t, redistest.Client(t), redistest.Prefix(t), stream, r)
}

// TestRetentionOnPush proves discard_push keeps the count cap and the age
// limit, each counted apart, the age step bounded per call, and a record
// without a time stopping the age limit.
func TestRetentionOnPush(t *testing.T) {
	r := Retention{Max: 3, MaxAge: time.Second}
	f := realRedis(t, false, r)
	for i := range 5 {
		f.push(t, r, 10_000+int64(i), "r", msg(i, "k"))
	}
	if got, want := f.ids(t), []string{"m-00004", "m-00003", "m-00002"}; !slices.Equal(got, want) {
		t.Fatalf("after 5 pushes with cap 3: %v, want %v", got, want)
	}
	if d, e := f.counters(t); d != 2 || e != 0 {
		t.Fatalf("dropped %d by count, %d by age; want 2, 0", d, e)
	}
	// At 11,003 the records of 10,002 are over a second old, 10,003 is not.
	f.push(t, r, 11_003, "r", msg(5, "k"))
	if got, want := f.ids(t), []string{"m-00005", "m-00004", "m-00003"}; !slices.Equal(got, want) {
		t.Fatalf("after a push a second later: %v, want %v", got, want)
	}
	if d, e := f.counters(t); d != 2 || e != 1 {
		t.Fatalf("dropped %d by count, %d by age; want 2, 1", d, e)
	}
	// A push much later drops all but itself by age, not by count.
	f.push(t, r, 20_000, "r", msg(6, "k"))
	if d, e := f.counters(t); d != 2 || e != 4 {
		t.Fatalf("dropped %d by count, %d by age; want 2, 4", d, e)
	}

	// No age limit: nothing goes for age.
	off := Retention{Max: 1000, MaxAge: -1}
	f.push(t, off, 1_000_000_000, "r", msg(7, "k"))
	if d, e := f.counters(t); d != 2 || e != 4 || len(f.ids(t)) != 2 {
		t.Fatalf("with no age limit: %d records, dropped %d, %d; want 2, 2, 4", len(f.ids(t)), d, e)
	}
}

// TestAgeStepBounded proves one discarding call drops at most AgeStep
// records for age, and the reading calls finish the job.
func TestAgeStepBounded(t *testing.T) {
	r := Retention{Max: 10_000, MaxAge: time.Hour}
	f := realRedis(t, false, r)
	var recs []string
	for i := range 250 {
		recs = append(recs, record(1000+int64(i), "stale", msg(i, "k")))
	}
	f.write(t, recs...)
	now := time.Now().UnixMilli()
	if n := f.push(t, r, now, "fresh", msg(999, "k")); n != 251-AgeStep {
		t.Fatalf("after one push: %d records, want %d (one step of %d)", n, 251-AgeStep, AgeStep)
	}
	page, total, err := f.x.ListDiscarded(ctxT(t), "q", 0, 10)
	if err != nil || total != 1 || len(page) != 1 || page[0].ID != "m-00999" {
		t.Fatalf("ListDiscarded = %d records, total %d, %v; want only m-00999", len(page), total, err)
	}
	if d, e := f.counters(t); d != 0 || e != 250 {
		t.Fatalf("dropped %d by count, %d by age; want 0, 250", d, e)
	}
}

// TestAgeStopsAtForeignRecord proves a record without a readable time (not
// Conveyor's) at the oldest end stops the age limit rather than being
// dropped for an age it does not have.
func TestAgeStopsAtForeignRecord(t *testing.T) {
	r := Retention{Max: 100, MaxAge: time.Hour}
	f := realRedis(t, false, r)
	f.write(t, "hand-written", record(1000, "stale", msg(1, "k")))
	s, err := f.x.DiscardStats(ctxT(t), "q")
	if err != nil || s.Count != 2 || s.DroppedByAge != 0 || !s.Oldest.IsZero() {
		t.Fatalf("DiscardStats = %+v, %v; want Count 2, nothing dropped, no Oldest", s, err)
	}
	page, _, err := f.x.ListDiscarded(ctxT(t), "q", 0, 10)
	if err != nil || len(page) != 2 || string(page[1].Raw) != "hand-written" || page[1].ID != "" {
		t.Fatalf("ListDiscarded = %+v, %v; want the stale record and the hand-written one in Raw", page, err)
	}
}

// TestRedriveList proves a re-drive into a list over 2,500 records (three
// pages) with records kept between the selected ones: each selected message
// goes to the ready list once, oldest first, attempt and recoveries 0 and
// deliveries one up; the others stay in order.
func TestRedriveList(t *testing.T) {
	f := realRedis(t, false, Retention{Max: 10_000, MaxAge: -1})
	const n = 2500
	now := time.Now().UnixMilli() - n
	var recs, picked, kept []string
	for i := range n {
		kind := "keep"
		if i%3 == 0 {
			kind = "pick"
			picked = append(picked, msg(i, kind).ID)
		} else {
			kept = append(kept, msg(i, kind).ID)
		}
		recs = append(recs, record(now+int64(i), "boom", msg(i, kind)))
	}
	f.write(t, recs...)
	got, err := f.x.Redrive(ctxT(t), "q", broker.DiscardFilter{Kind: "pick"}, 0)
	if err != nil || got != len(picked) {
		t.Fatalf("Redrive(kind pick) = %d, %v; want %d", got, err, len(picked))
	}
	slices.Reverse(kept)
	if ids := f.ids(t); !slices.Equal(ids, kept) {
		t.Fatalf("records kept: %d, want %d in order", len(ids), len(kept))
	}
	ready, err := f.rdb.LRange(ctxT(t), f.to.Key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(ready) // RPOP order
	var readyIDs []string
	for _, v := range ready {
		var m broker.Message
		d, err := codec.Decode([]byte(v), &m)
		if err != nil {
			t.Fatalf("re-driven message does not decode: %v", err)
		}
		if d != 4 || m.Retries != 0 || m.Recoveries != 0 || m.Kind != "pick" || m.MaxAttempts != 5 || m.Headers["h"] != "v" {
			t.Fatalf("re-driven %s: deliveries %d, attempt %d, recoveries %d, %+v; want 4, 0, 0 and the rest kept", m.ID, d, m.Retries, m.Recoveries, m)
		}
		readyIDs = append(readyIDs, m.ID)
	}
	if !slices.Equal(readyIDs, picked) {
		t.Fatalf("ready holds %d messages, want the %d picked, oldest first", len(readyIDs), len(picked))
	}
}

// TestRedriveStream proves a re-drive into a stream creates the stream
// and its group, and appends the messages with their counters reset.
func TestRedriveStream(t *testing.T) {
	f := realRedis(t, true, Retention{Max: 100, MaxAge: -1})
	now := time.Now().UnixMilli()
	f.write(t, record(now-2, "a", msg(1, "k")), record(now-1, "b", msg(2, "k")))
	if got, err := f.x.Redrive(ctxT(t), "q", broker.DiscardFilter{}, 0); err != nil || got != 2 {
		t.Fatalf("Redrive = %d, %v; want 2", got, err)
	}
	xs, err := f.rdb.XReadGroup(ctxT(t), &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{f.to.Key, ">"}, Count: 10}).Result()
	if err != nil {
		t.Fatalf("XREADGROUP: %v", err)
	}
	var ids []string
	for _, x := range xs[0].Messages {
		var m broker.Message
		s, _ := x.Values["m"].(string)
		if d, err := codec.Decode([]byte(s), &m); err != nil || d != 3 || m.Retries != 0 || m.Recoveries != 0 {
			t.Fatalf("re-driven entry: deliveries %d, %+v, %v; want 3 (as stored), attempt and recoveries 0", d, m, err)
		}
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"m-00001", "m-00002"}) {
		t.Fatalf("stream holds %v, want [m-00001 m-00002]", ids)
	}
}

// TestWalkCursorGone proves the walk skips no record when the record it
// stopped after is trimmed between two pages: it starts again from the
// oldest record.
func TestWalkCursorGone(t *testing.T) {
	f := realRedis(t, false, Retention{Max: 100, MaxAge: -1})
	now := time.Now().UnixMilli() - 100
	var recs []string
	for i := range 30 {
		kind := "keep"
		if i%2 == 1 {
			kind = "pick"
		}
		recs = append(recs, record(now+int64(i), "r", msg(i, kind)))
	}
	f.write(t, recs...)
	walk := func(start int64, cursor string) (int64, int64, int64, string) {
		v, err := walkScript.Run(ctxT(t), f.rdb, []string{f.k.Dead, f.to.Key}, "purge", "list", "", "", KindArg("pick"), 100, 10, start, cursor)
		if err != nil {
			t.Fatal(err)
		}
		r := v.([]any)
		return r[0].(int64), r[1].(int64), r[2].(int64), r[3].(string)
	}
	n, done, start, cursor := walk(0, "")
	if n != 5 || done != 0 || cursor != recs[8] {
		t.Fatalf("first page: %d acted, done %d, cursor %q; want 5, 0, the record of m-00008", n, done, cursor)
	}
	// Something trims the five oldest records, the cursor among them.
	if err := f.rdb.LTrim(ctxT(t), f.k.Dead, 0, -6).Err(); err != nil {
		t.Fatal(err)
	}
	total := n
	for range 10 {
		n, done, start, cursor = walk(start, cursor)
		total += n
		if done == 1 {
			break
		}
	}
	if total != 15 || done != 1 {
		t.Fatalf("purged %d, done %d; want all 15 picked, done", total, done)
	}
	left, err := f.rdb.LRange(ctxT(t), f.k.Dead, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range left {
		if d := Decode("q", []byte(r)); d.Kind != "keep" {
			t.Fatalf("a record of kind %q is left: %s", d.Kind, d.ID)
		}
	}
	if len(left) != 10 {
		t.Fatalf("%d records left, want the 10 kept that were not trimmed", len(left))
	}
}

// TestWalkStopsAtStart proves a walk leaves the records made after it
// began: a message re-driven and discarded again is not re-driven twice.
func TestWalkStopsAtStart(t *testing.T) {
	f := realRedis(t, false, Retention{Max: 100, MaxAge: -1})
	now := time.Now().UnixMilli()
	f.write(t, record(now-10, "old", msg(1, "k")), record(now+60_000, "later", msg(2, "k")), record(now-5, "old", msg(3, "k")))
	got, err := f.x.Redrive(ctxT(t), "q", broker.DiscardFilter{}, 0)
	if err != nil || got != 1 {
		t.Fatalf("Redrive = %d, %v; want 1 (the walk ends at the record made after it began)", got, err)
	}
	if ids := f.ids(t); !slices.Equal(ids, []string{"m-00003", "m-00002"}) {
		t.Fatalf("records left %v, want [m-00003 m-00002]", ids)
	}
}

// TestMalformedRecords proves a re-drive leaves records it cannot read
// (and does not count them), a purge of all removes them, a filter never
// selects them, and ListDiscarded shows them in Raw.
func TestMalformedRecords(t *testing.T) {
	f := realRedis(t, false, Retention{Max: 100, MaxAge: -1})
	now := time.Now().UnixMilli() - 10
	bad := fmt.Sprintf("d1,%d,3:abcnot a message", now)
	f.write(t, "garbage", bad, record(now, "ok", msg(1, "k")))
	page, _, err := f.x.ListDiscarded(ctxT(t), "q", 0, 10)
	if err != nil || len(page) != 3 {
		t.Fatalf("ListDiscarded: %d records, %v", len(page), err)
	}
	if page[0].Raw != nil || string(page[1].Raw) != "not a message" || page[1].Reason != "abc" || string(page[2].Raw) != "garbage" {
		t.Fatalf("ListDiscarded = %+v; want a good record, then Raw %q and %q", page, "not a message", "garbage")
	}
	if got, err := f.x.Redrive(ctxT(t), "q", broker.DiscardFilter{}, 0); err != nil || got != 1 {
		t.Fatalf("Redrive = %d, %v; want 1", got, err)
	}
	if got, err := f.x.PurgeDiscarded(ctxT(t), "q", broker.DiscardFilter{Kind: "k"}, 0); err != nil || got != 0 {
		t.Fatalf("PurgeDiscarded(kind) = %d, %v; want 0", got, err)
	}
	if got, err := f.x.PurgeDiscarded(ctxT(t), "q", broker.DiscardFilter{}, 0); err != nil || got != 2 {
		t.Fatalf("PurgeDiscarded(all) = %d, %v; want 2", got, err)
	}
	if n, err := f.rdb.Exists(ctxT(t), f.k.Dead).Result(); err != nil || n != 0 {
		t.Fatalf("discard list exists after purging all: %d, %v", n, err)
	}
}

// TestScriptsRunOnMiniredis runs every script on miniredis (gopher-lua),
// and the age limit against its settable clock.
func TestScriptsRunOnMiniredis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	now := time.Now()
	mr.SetTime(now)
	ctx := ctxT(t)
	for _, stream := range []bool{false, true} {
		prefix := fmt.Sprint("mr", stream)
		r := Retention{Max: 3, MaxAge: time.Hour}
		f := newFixture(t, rdb, prefix, stream, r)
		for i := range 4 {
			f.push(t, r, now.UnixMilli()-int64(4-i), "r", msg(i, []string{"a", "b"}[i%2]))
		}
		if d, _ := f.counters(t); d != 1 {
			t.Fatalf("dropped %d by count, want 1", d)
		}
		if got, err := f.x.GetDiscarded(ctx, "q", "m-00002"); err != nil || got == nil || got.Kind != "a" {
			t.Fatalf("GetDiscarded = %+v, %v", got, err)
		}
		if got, err := f.x.Redrive(ctx, "q", broker.DiscardFilter{Kind: "b"}, 0); err != nil || got != 2 {
			t.Fatalf("Redrive(kind b) = %d, %v; want 2", got, err)
		}
		if got, err := f.x.PurgeDiscarded(ctx, "q", broker.DiscardFilter{ID: "m-00002"}, 0); err != nil || got != 1 {
			t.Fatalf("PurgeDiscarded(id) = %d, %v; want 1", got, err)
		}
		f.push(t, r, now.UnixMilli(), "r", msg(9, "a"))
		mr.SetTime(now.Add(90 * time.Minute))
		page, total, err := f.x.ListDiscarded(ctx, "q", 0, 10)
		if err != nil || total != 0 || len(page) != 0 {
			t.Fatalf("ListDiscarded an hour and a half later: %d records, total %d, %v; want none", len(page), total, err)
		}
		s, err := f.x.DiscardStats(ctx, "q")
		if err != nil || s.Count != 0 || s.DroppedByAge != 1 || s.DroppedByCount != 1 {
			t.Fatalf("DiscardStats = %+v, %v; want 0 records, 1 dropped by age, 1 by count", s, err)
		}
		mr.SetTime(now)
	}
}

func TestCheckRetention(t *testing.T) {
	t.Parallel()
	r, err := CheckRetention(0, 0)
	if err != nil || r.Max != 10_000 || r.MaxAge != 7*24*time.Hour || r.AgeArg() != 7*24*3600*1000 {
		t.Fatalf("defaults: %+v, %v; want 10000 and 7 days", r, err)
	}
	if r, err := CheckRetention(5, -1); err != nil || r.Max != 5 || r.AgeArg() != -1 {
		t.Fatalf("no age limit: %+v (arg %d), %v", r, r.AgeArg(), err)
	}
	for _, bad := range []Retention{{Max: -1}, {MaxAge: time.Microsecond}} {
		if _, err := CheckRetention(bad.Max, bad.MaxAge); err == nil {
			t.Errorf("CheckRetention(%d, %v): nil error", bad.Max, bad.MaxAge)
		}
	}
}

func TestKindArgIsExact(t *testing.T) {
	t.Parallel()
	body := codec.Encode(&broker.Message{ID: "x", Kind: "alphabet"}, 1)
	_, n, err := codec.ParseHeader(body)
	if err != nil {
		t.Fatal(err)
	}
	rest := string(body[n:])
	if !strings.HasPrefix(rest, KindArg("alphabet")) || strings.HasPrefix(rest, KindArg("alpha")) {
		t.Fatalf("KindArg does not match kinds exactly: body %q", rest)
	}
	if KindArg("") != "" {
		t.Fatal(`KindArg("") is not ""`)
	}
}

// FuzzDecode: Decode reads what sits in Redis, which anyone may have
// written; it must never panic, and a record it made must say so.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(record(1, "r", msg(1, "k"))))
	f.Add([]byte("d1,5,3:abcnot a message"))
	f.Add([]byte("d1,5,99:short"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, rec []byte) {
		d := Decode("q", rec)
		if d.Queue != "q" {
			t.Fatalf("Queue %q", d.Queue)
		}
		if _, err := codec.DecodeDiscarded(rec); err != nil && d.Raw == nil {
			t.Fatalf("%q is no record, yet Raw is nil", rec)
		}
	})
}
