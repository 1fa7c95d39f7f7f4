package records

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// putScript runs lib.lua's record_put with the time given, as the drivers'
// settle scripts do with the server's: retention is tested at any "now"
// without waiting.
var putScript = script.New("records.test.put", timers.Lib+Lib+`
record_put(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return redis.call('ZCARD', KEYS[2])
`)

func TestRetention(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	const q = "q"
	k := QueueKeys(prefix, q)
	x := &Records{Name: "test", Client: rdb, Prefix: prefix, Max: 2}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	put := func(at time.Time, id string, keep time.Duration) {
		t.Helper()
		_, data, err := Args(&broker.FinishRecord{Keep: keep, Record: broker.JobRecord{Queue: q, Kind: "k", Outcome: "acked", Attempt: 1}}, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := putScript.Run(ctx, rdb, k.List(), at.UnixMilli(), x.Max, id, keep.Milliseconds(), data); err != nil {
			t.Fatalf("record_put %s: %v", id, err)
		}
	}

	// Over the cap: the soonest to expire goes, counted as dropped.
	put(now, "a", 3*time.Hour)
	put(now, "b", time.Hour)
	put(now, "c", 2*time.Hour)
	st, err := x.RecordStats(ctx, q)
	if err != nil || st.Count != 2 || st.DroppedByCount != 1 || st.Expired != 0 || st.MaxCount != 2 {
		t.Fatalf("after 3 records under a cap of 2: %+v, %v; want 2 held, 1 dropped", st, err)
	}
	if r, err := x.GetRecord(ctx, q, "b"); err != nil || r != nil {
		t.Fatalf("GetRecord(b), the soonest to expire, = %+v, %v; want dropped", r, err)
	}
	for _, id := range []string{"a", "c"} {
		r, err := x.GetRecord(ctx, q, id)
		if err != nil || r == nil || r.ID != id || r.FinishedAt.UnixMilli() != now.UnixMilli() {
			t.Fatalf("GetRecord(%s) = %+v, %v", id, r, err)
		}
	}

	// The keys expire with their latest record.
	for _, key := range k.List() {
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil || ttl <= 2*time.Hour || ttl > 3*time.Hour {
			t.Fatalf("PTTL %s = %v, %v; want about 3h (the latest record's keep)", key, ttl, err)
		}
	}

	// A record whose time ran out is not served, and the next call drops
	// it, counted as expired.
	put(now.Add(-2*time.Hour), "a", time.Hour)
	if r, err := x.GetRecord(ctx, q, "a"); err != nil || r != nil {
		t.Fatalf("GetRecord of an expired record = %+v, %v; want nil", r, err)
	}
	st, err = x.RecordStats(ctx, q)
	if err != nil || st.Count != 1 || st.Expired != 1 {
		t.Fatalf("after an expiry: %+v, %v; want 1 held, 1 expired", st, err)
	}
	// The read that dropped it left every key with a TTL past c's
	// expiry: the counters too, though the read created neither. (The
	// write above ran at a "now" 2h back, so the TTLs run 2h past it.)
	for _, key := range k.List() {
		if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl < 2*time.Hour-time.Minute {
			t.Fatalf("PTTL %s after a read dropped a record = %v, %v; want at least c's 2h", key, ttl, err)
		}
	}
	// A queue whose first drop is made by a read: the counters it creates
	// expire with the records too.
	k2 := QueueKeys(prefix, "q2")
	for _, r := range []struct {
		at   time.Time
		id   string
		keep time.Duration
	}{{now, "live", time.Hour}, {now.Add(-time.Hour), "old", time.Minute}} {
		_, data, _ := Args(&broker.FinishRecord{Keep: r.keep}, r.id)
		if _, err := putScript.Run(ctx, rdb, k2.List(), r.at.UnixMilli(), x.Max, r.id, r.keep.Milliseconds(), data); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := x.RecordStats(ctx, "q2"); err != nil || st.Count != 1 || st.Expired != 1 {
		t.Fatalf("q2 after a read dropped a record: %+v, %v; want 1 held, 1 expired", st, err)
	}
	if ttl, err := rdb.PTTL(ctx, k2.Counts).Result(); err != nil || ttl <= 0 {
		t.Fatalf("PTTL of q2's counters, made by a read = %v, %v; want a TTL", ttl, err)
	}
	page, total, err := x.ListRecords(ctx, q, 0, 10)
	if err != nil || total != 1 || len(page) != 1 || page[0].ID != "c" {
		t.Fatalf("ListRecords = %v of %d, %v; want [c]", page, total, err)
	}
}

func TestArgs(t *testing.T) {
	t.Parallel()
	if keep, data, err := Args(nil, "x"); keep != 0 || data != "" || err != nil {
		t.Fatalf("Args(nil) = %d, %q, %v; want no record", keep, data, err)
	}
	if _, _, err := Args(&broker.FinishRecord{Keep: time.Microsecond}, "x"); err == nil {
		t.Fatal("Args with a keep under 1ms: no error")
	}
	big := &broker.FinishRecord{Keep: time.Hour, Record: broker.JobRecord{Result: make([]byte, broker.MaxRecordResult+1)}}
	if _, _, err := Args(big, "x"); err == nil || !strings.Contains(err.Error(), "result") {
		t.Fatalf("Args with a result over the cap: %v; want an error naming the result", err)
	}
	long := strings.Repeat("é", broker.MaxRecordError)
	cut := CutError(long)
	if len(cut) > broker.MaxRecordError || !utf8.ValidString(cut) || !strings.HasSuffix(cut, "(cut)") {
		t.Fatalf("CutError: %d bytes, valid %v, suffix %q", len(cut), utf8.ValidString(cut), cut[len(cut)-10:])
	}
	// The times in the JSON are the script's, not the caller's.
	_, data, err := Args(&broker.FinishRecord{Keep: time.Hour, Record: broker.JobRecord{ID: "other", FinishedAt: time.Now()}}, "x")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode("5,7," + data)
	if err != nil || r.ID != "x" || r.FinishedAt.UnixMilli() != 5 || r.ExpiresAt.UnixMilli() != 7 {
		t.Fatalf("Decode = %+v, %v", r, err)
	}
	for _, bad := range []string{"", "5", "5,x,{}", "5,7,{"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q): no error", bad)
		}
	}
}

// BenchmarkRecordMemory writes 10,000 records of a typical job (a ULID, a
// kind, a worker ID, a 30-byte result, no error) and reports the memory
// Redis holds per record (MEMORY USAGE of the three keys, every element
// counted) and the time of a record_put.
func BenchmarkRecordMemory(b *testing.B) {
	rdb := redistest.Client(b)
	ctx := b.Context()
	prefix := redistest.Prefix(b)
	k := QueueKeys(prefix, "q")
	const n = 10000
	now := time.Now()
	_, data, err := Args(&broker.FinishRecord{Keep: 24 * time.Hour, Record: broker.JobRecord{
		Queue: "q", Kind: "order.timeout", Outcome: "acked", Attempt: 1, EnqueuedAt: now, StartedAt: now,
		Worker: "host-1234-0a1b2c3d", Result: []byte(`{"invoice":"INV-2026-000123"}`),
	}}, "01M87QVMMZ115T7RBKFRZNCY1M")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("01M87QVMMZ115T7RBKF%07d", i%n)
		if _, err := putScript.Run(ctx, rdb, k.List(), now.UnixMilli()+int64(i), n, id, (24 * time.Hour).Milliseconds(), data); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for i := range n { // fill up to n, whatever b.N was
		id := fmt.Sprintf("01M87QVMMZ115T7RBKF%07d", i)
		if _, err := putScript.Run(ctx, rdb, k.List(), now.UnixMilli(), n, id, (24 * time.Hour).Milliseconds(), data); err != nil {
			b.Fatal(err)
		}
	}
	var total int64
	for _, key := range k.List() {
		m, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			b.Fatal(err)
		}
		total += m
	}
	b.ReportMetric(float64(total)/n, "B/record")
	b.ReportMetric(float64(len(data)), "B-json")
}
