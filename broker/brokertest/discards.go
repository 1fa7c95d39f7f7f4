package brokertest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
)

// The discard-queue tests run on drivers with Capabilities.Discard (and
// AtLeastOnce), which must implement broker.Discards. They read the
// retention in force from DiscardStats, so a driver configured with other
// limits than the defaults passes them too; to test retention without
// waiting they write records straight into the queue's discard key, whose
// layout docs/redis-keys.md makes public: <prefix>:{<queue>}:dead, a LIST of
// records "d1,<unix ms>,<len(reason)>:<reason><stored message>", newest
// first.

// discardsOf returns d's discard queue; a driver with Discard must have one.
func discardsOf(t testing.TB, d broker.Driver) broker.Discards {
	t.Helper()
	x, ok := d.(broker.Discards)
	if !ok {
		t.Fatalf("driver %T has Capabilities.Discard but does not implement broker.Discards", d)
	}
	return x
}

// discardMessages enqueues msgs (all of queue q), fetches them on c and
// discards each, in the order of msgs, with reason(i). Each record's time
// is between the returned before and after.
func discardMessages(t testing.TB, d broker.Driver, c broker.Consumer, msgs []*broker.Message, reason func(i int) string) (before, after time.Time) {
	t.Helper()
	ctx := Context(t, time.Minute)
	Enqueue(t, d, msgs...)
	byID := make(map[string]*broker.Delivery, len(msgs))
	for _, dl := range FetchN(t, c, len(msgs), 1000, 10*time.Second) {
		byID[dl.ID] = dl
	}
	before = time.Now()
	for i, m := range msgs {
		dl := byID[m.ID]
		if dl == nil {
			t.Fatalf("message %s was not fetched", m.ID)
		}
		if err := c.Discard(ctx, dl, reason(i)); err != nil {
			t.Fatalf("Discard(%s): %v", m.ID, err)
		}
	}
	return before, time.Now()
}

// listAll pages through queue's records, limit at a time, and returns them
// newest first. It fails t if a page is longer than asked or a total
// changes.
func listAll(t testing.TB, x broker.Discards, q string, limit int) []*broker.Discarded {
	t.Helper()
	ctx := Context(t, time.Minute)
	var out []*broker.Discarded
	for {
		page, total, err := x.ListDiscarded(ctx, q, len(out), limit)
		if err != nil {
			t.Fatalf("ListDiscarded(%q, %d, %d): %v", q, len(out), limit, err)
		}
		if len(page) > limit {
			t.Fatalf("ListDiscarded(%q, %d, %d) returned %d records", q, len(out), limit, len(page))
		}
		out = append(out, page...)
		if len(page) == 0 {
			if int64(len(out)) != total {
				t.Fatalf("ListDiscarded(%q) pages hold %d records, total says %d", q, len(out), total)
			}
			return out
		}
	}
}

// recordIDs returns the message IDs of recs in order.
func recordIDs(recs []*broker.Discarded) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// messageIDs returns the IDs of msgs in order, or in reverse.
func messageIDs(msgs []*broker.Message, reverse bool) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	if reverse {
		slices.Reverse(out)
	}
	return out
}

// discardRecord is the record of m discarded at at with reason, as
// docs/redis-keys.md lays it out.
func discardRecord(at time.Time, reason string, m *broker.Message) string {
	return fmt.Sprintf("d1,%d,%d:%s%s", at.UnixMilli(), len(reason), reason, codec.Encode(m, 1))
}

// writeDiscardRecords adds recs, oldest first, to the newest end of queue's
// discard key (its first partition's, for a Partitioned driver), as a
// driver would have written them.
func writeDiscardRecords(t testing.TB, e *env, queue string, recs []string) {
	t.Helper()
	ctx := Context(t, time.Minute)
	key := keys.Queue(e.prefix, partitions(e.d, queue)[0]).Part("dead")
	for len(recs) > 0 {
		n := min(len(recs), 1000)
		args := make([]any, n)
		for i, r := range recs[:n] {
			args[i] = r
		}
		if err := Client(t).LPush(ctx, key, args...).Err(); err != nil {
			t.Fatalf("LPUSH %s: %v", key, err)
		}
		recs = recs[n:]
	}
}

// discardKeyLen is the length of queue's discard key, read without the
// driver (whose reading calls enforce the age limit themselves).
func discardKeyLen(t testing.TB, e *env, queue string) int64 {
	t.Helper()
	var sum int64
	for _, p := range partitions(e.d, queue) {
		key := keys.Queue(e.prefix, p).Part("dead")
		n, err := Client(t).LLen(Context(t, 10*time.Second), key).Result()
		if err != nil {
			t.Fatalf("LLEN %s: %v", key, err)
		}
		sum += n
	}
	return sum
}

func discardStats(t testing.TB, x broker.Discards, q string) broker.DiscardStats {
	t.Helper()
	s, err := x.DiscardStats(Context(t, 30*time.Second), q)
	if err != nil {
		t.Fatalf("DiscardStats(%q): %v", q, err)
	}
	return s
}

// testDiscardsInspect proves ListDiscarded returns a queue's records newest
// first, page by page, each with the message as discarded (Retries and
// Recoveries included), the reason and the time, and GetDiscarded finds a
// record by message ID; other queues' records stay apart.
func testDiscardsInspect(t *testing.T, e *env) {
	const q = "dl-inspect"
	x := discardsOf(t, e.d)
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})

	// A message with one failed attempt and one crash recovery behind it.
	m := NewMessage(q, 0)
	m.Kind = "worn"
	m.Headers = map[string]string{"trace": "t-1"}
	m.MaxAttempts = 7
	Enqueue(t, e.d, m)
	if err := c.Retry(ctx, FetchOne(t, c, 5*time.Second), time.Time{}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	FetchOne(t, c, 5*time.Second) // not settled: its lease runs out
	worn := FetchOne(t, c, 10*time.Second)
	if worn.Retries != 1 || worn.Recoveries != 1 {
		t.Fatalf("delivery has Retries %d, Recoveries %d; want 1 and 1", worn.Retries, worn.Recoveries)
	}
	t0 := time.Now()
	if err := c.Discard(ctx, worn, "worn out"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	msgs := []*broker.Message{NewMessage(q, 1), NewMessage(q, 2), NewMessage(q, 3)}
	_, t1 := discardMessages(t, e.d, Open(t, e.d, q, nil), msgs, func(i int) string { return fmt.Sprintf("reason %d: ünïcode {x}\n", i) })
	other := Open(t, e.d, "dl-inspect-other", nil)
	discardMessages(t, e.d, other, []*broker.Message{NewMessage("dl-inspect-other", 9)}, func(int) string { return "elsewhere" })

	all := []*broker.Message{m, msgs[0], msgs[1], msgs[2]}
	want := messageIDs(all, true)
	for _, limit := range []int{1, 3, 1000} {
		if got := recordIDs(listAll(t, x, q, limit)); !inOrder(e, q, got, want) {
			t.Fatalf("ListDiscarded with pages of %d: %v, want newest first %v", limit, got, want)
		}
	}
	page, total, err := x.ListDiscarded(ctx, q, 1, 2)
	// (A split queue orders records of one millisecond in different
	// partitions as it may: only the count holds for an inner page.)
	if err != nil || total != 4 || (!slices.Equal(recordIDs(page), want[1:3]) && !(split(e.d, q) && len(page) == 2)) {
		t.Fatalf("ListDiscarded(offset 1, limit 2) = %v, %d, %v; want %v, 4, nil", recordIDs(page), total, err, want[1:3])
	}
	page, total, err = x.ListDiscarded(ctx, q, 10, 5)
	if err != nil || total != 4 || len(page) != 0 {
		t.Fatalf("ListDiscarded past the end = %d records, total %d, %v; want none, 4, nil", len(page), total, err)
	}

	recs := listAll(t, x, q, 10)
	// byID finds a record by its job's ID: the order is checked above (a
	// split queue may order records of one millisecond either way).
	byID := func(id string) *broker.Discarded {
		return recs[slices.IndexFunc(recs, func(r *broker.Discarded) bool { return r.ID == id })]
	}
	for i, r := range recs {
		wm := all[slices.IndexFunc(all, func(m *broker.Message) bool { return m.ID == r.ID })]
		checkSameMessage(t, &r.Message, wm)
		if r.Queue != q || r.Raw != nil {
			t.Errorf("%s: Queue %q, Raw %q; want %q and nil", r.ID, r.Queue, r.Raw, q)
		}
		if r.DiscardedAt.Before(t0.Add(-time.Second)) || r.DiscardedAt.After(t1.Add(time.Second)) {
			t.Errorf("%s: DiscardedAt %v, want between %v and %v", r.ID, r.DiscardedAt, t0, t1)
		}
		if i > 0 && r.DiscardedAt.After(recs[i-1].DiscardedAt) {
			t.Errorf("%s discarded at %v, after the newer %s (%v)", r.ID, r.DiscardedAt, recs[i-1].ID, recs[i-1].DiscardedAt)
		}
	}
	if r := byID(m.ID); r.Reason != "worn out" || r.Retries != 1 || r.Recoveries != 1 {
		t.Errorf("record of %s: reason %q, Retries %d, Recoveries %d; want \"worn out\", 1, 1", r.ID, r.Reason, r.Retries, r.Recoveries)
	}
	if r := byID(msgs[2].ID); r.Reason != "reason 2: ünïcode {x}\n" || r.Retries != 0 || r.Recoveries != 0 {
		t.Errorf("record of %s: reason %q, Retries %d, Recoveries %d; want \"reason 2: ünïcode {x}\\n\", 0, 0", r.ID, r.Reason, r.Retries, r.Recoveries)
	}

	got, err := x.GetDiscarded(ctx, q, msgs[1].ID)
	if err != nil || got == nil {
		t.Fatalf("GetDiscarded(%s) = %v, %v; want its record", msgs[1].ID, got, err)
	}
	if got.ID != msgs[1].ID || got.Reason != "reason 1: ünïcode {x}\n" {
		t.Errorf("GetDiscarded(%s) = %s with reason %q", msgs[1].ID, got.ID, got.Reason)
	}
	checkSameMessage(t, &got.Message, msgs[1])
	if got, err := x.GetDiscarded(ctx, q, m.ID); err != nil || got == nil || got.Retries != 1 || got.Recoveries != 1 {
		t.Errorf("GetDiscarded(%s) = %+v, %v; want Retries 1 and Recoveries 1", m.ID, got, err)
	}
	for _, id := range []string{"dl-inspect-other-000009", "nosuch"} {
		if got, err := x.GetDiscarded(ctx, q, id); err != nil || got != nil {
			t.Errorf("GetDiscarded(%s) = %+v, %v; want nil, nil", id, got, err)
		}
	}
	if s := discardStats(t, x, q); s.Count != 4 || s.DroppedByCount != 0 || s.DroppedByAge != 0 ||
		!s.Oldest.Equal(recs[3].DiscardedAt) || s.MaxCount < 1 {
		t.Errorf("DiscardStats = %+v; want Count 4, nothing dropped, Oldest %v", s, recs[3].DiscardedAt)
	}
	if _, _, err := x.ListDiscarded(ctx, "bad{queue}", 0, 10); err == nil {
		t.Error("ListDiscarded of a queue named with braces: nil error")
	}
}

// testDiscardsRedriveOne proves a re-drive by ID moves exactly that record
// back to the queue: the message is fetchable again with Retries and
// Recoveries 0 and the rest as it was, can be acked, and its record is gone.
func testDiscardsRedriveOne(t *testing.T, e *env) {
	const q = "dl-redrive-one"
	x := discardsOf(t, e.d)
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: shortLease})
	m := NewMessage(q, 1)
	m.Headers = map[string]string{"k": "v"}
	m.MaxAttempts, m.Timeout = 3, 2*time.Second
	Enqueue(t, e.d, m)
	for range 2 {
		if err := c.Retry(ctx, FetchOne(t, c, 5*time.Second), time.Time{}); err != nil {
			t.Fatalf("Retry: %v", err)
		}
	}
	FetchOne(t, c, 5*time.Second) // its lease runs out
	d := FetchOne(t, c, 10*time.Second)
	if d.Retries != 2 || d.Recoveries != 1 {
		t.Fatalf("delivery has Retries %d, Recoveries %d; want 2 and 1", d.Retries, d.Recoveries)
	}
	if err := c.Discard(ctx, d, "out of attempts"); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	others := []*broker.Message{NewMessage(q, 2), NewMessage(q, 3)}
	c = Open(t, e.d, q, nil) // the default lease from here on
	discardMessages(t, e.d, c, others, func(int) string { return "other" })

	if n, err := x.Redrive(ctx, q, broker.DiscardFilter{ID: "nosuch"}, 0); err != nil || n != 0 {
		t.Fatalf("Redrive of an unknown ID = %d, %v; want 0, nil", n, err)
	}
	if n, err := x.Redrive(ctx, q, broker.DiscardFilter{ID: m.ID, Kind: "otherkind"}, 0); err != nil || n != 0 {
		t.Fatalf("Redrive of %s with another kind = %d, %v; want 0, nil", m.ID, n, err)
	}
	n, err := x.Redrive(ctx, q, broker.DiscardFilter{ID: m.ID}, 1)
	if err != nil || n != 1 {
		t.Fatalf("Redrive(%s) = %d, %v; want 1, nil", m.ID, n, err)
	}
	back := FetchOne(t, c, 5*time.Second)
	if back.ID != m.ID || back.Retries != 0 || back.Recoveries != 0 {
		t.Fatalf("re-driven delivery %s with Retries %d, Recoveries %d; want %s, 0, 0", back.ID, back.Retries, back.Recoveries, m.ID)
	}
	checkSameMessage(t, &back.Message, m)
	if err := c.Ack(ctx, back); err != nil {
		t.Fatalf("Ack of the re-driven delivery: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	if got, err := x.GetDiscarded(ctx, q, m.ID); err != nil || got != nil {
		t.Fatalf("GetDiscarded(%s) after its re-drive = %+v, %v; want nil", m.ID, got, err)
	}
	if got := recordIDs(listAll(t, x, q, 10)); !inOrder(e, q, got, messageIDs(others, true)) {
		t.Fatalf("records after the re-drive: %v, want %v", got, messageIDs(others, true))
	}
	if n, err := x.Redrive(ctx, q, broker.DiscardFilter{ID: m.ID}, 0); err != nil || n != 0 {
		t.Fatalf("second Redrive(%s) = %d, %v; want 0, nil", m.ID, n, err)
	}
}

// testDiscardsRedriveFilter proves re-drive by kind and of all records:
// only the selected records move, oldest first, up to max; the others stay
// in order; re-driven messages come out in the order they were discarded,
// with Retries 0.
func testDiscardsRedriveFilter(t *testing.T, e *env) {
	const q = "dl-redrive-kind"
	x := discardsOf(t, e.d)
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, nil)
	var alpha, beta []*broker.Message
	msgs := make([]*broker.Message, 8)
	for i := range msgs {
		m := NewMessage(q, i)
		m.Kind = "beta"
		if i%2 == 0 {
			m.Kind = "alpha"
			alpha = append(alpha, m)
		} else {
			beta = append(beta, m)
		}
		msgs[i] = m
	}
	// "alph" and "alphabet" must not pass for "alpha".
	near := []*broker.Message{NewMessage(q, 100), NewMessage(q, 101)}
	near[0].Kind, near[1].Kind = "alph", "alphabet"
	discardMessages(t, e.d, c, append(slices.Clone(msgs), near...), func(int) string { return "boom" })

	if n, err := x.Redrive(ctx, q, broker.DiscardFilter{Kind: "nosuch"}, 0); err != nil || n != 0 {
		t.Fatalf("Redrive of an unknown kind = %d, %v; want 0, nil", n, err)
	}
	n, err := x.Redrive(ctx, q, broker.DiscardFilter{Kind: "alpha"}, 0)
	if err != nil || n != len(alpha) {
		t.Fatalf("Redrive(kind alpha) = %d, %v; want %d, nil", n, err, len(alpha))
	}
	ds := FetchN(t, c, len(alpha), 100, 5*time.Second)
	if got := IDs(ds); !inOrder(e, q, got, messageIDs(alpha, false)) {
		t.Fatalf("fetched %v after Redrive(kind alpha), want %v", got, messageIDs(alpha, false))
	}
	for _, d := range ds {
		if d.Kind != "alpha" || d.Retries != 0 {
			t.Errorf("re-driven %s: kind %q, Retries %d", d.ID, d.Kind, d.Retries)
		}
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	wantLeft := append(messageIDs(beta, false), messageIDs(near, false)...)
	slices.Reverse(wantLeft)
	if got := recordIDs(listAll(t, x, q, 3)); !inOrder(e, q, got, wantLeft) {
		t.Fatalf("records left: %v, want %v", got, wantLeft)
	}

	// All, two at most: the two oldest.
	n, err = x.Redrive(ctx, q, broker.DiscardFilter{}, 2)
	if err != nil || n != 2 {
		t.Fatalf("Redrive(all, max 2) = %d, %v; want 2, nil", n, err)
	}
	two := IDs(FetchN(t, c, 2, 10, 5*time.Second))
	if got := two; !slices.Equal(got, messageIDs(beta[:2], false)) && !split(e.d, q) {
		t.Fatalf("fetched %v after Redrive(all, max 2), want the oldest %v", got, messageIDs(beta[:2], false))
	}
	n, err = x.Redrive(ctx, q, broker.DiscardFilter{}, 0)
	if want := len(beta) - 2 + len(near); err != nil || n != want {
		t.Fatalf("Redrive(all) = %d, %v; want %d, nil", n, err, want)
	}
	if s := discardStats(t, x, q); s.Count != 0 {
		t.Fatalf("DiscardStats after re-driving everything: Count %d, want 0", s.Count)
	}
	rest := append(messageIDs(beta[2:], false), messageIDs(near, false)...)
	if split(e.d, q) {
		// Redrive(max 2) took the oldest of some partition: the rest is
		// what it left.
		rest = slices.DeleteFunc(append(messageIDs(beta, false), messageIDs(near, false)...), func(id string) bool { return slices.Contains(two, id) })
	}
	if got := IDs(FetchN(t, c, len(rest), 100, 5*time.Second)); !inOrder(e, q, got, rest) {
		t.Fatalf("fetched %v after Redrive(all), want %v", got, rest)
	}
}

// testDiscardsPurge proves purge by ID, by kind and of all records deletes
// exactly the selected ones, re-drives nothing and counts nothing as
// dropped.
func testDiscardsPurge(t *testing.T, e *env) {
	const q = "dl-purge"
	x := discardsOf(t, e.d)
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, nil)
	msgs := make([]*broker.Message, 6)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
		msgs[i].Kind = []string{"a", "b"}[i%2]
	}
	discardMessages(t, e.d, c, msgs, func(int) string { return "boom" })

	steps := []struct {
		f    broker.DiscardFilter
		max  int
		want int
		left []int
	}{
		{broker.DiscardFilter{ID: msgs[0].ID}, 0, 1, []int{5, 4, 3, 2, 1}},
		{broker.DiscardFilter{ID: msgs[2].ID, Kind: "b"}, 0, 0, []int{5, 4, 3, 2, 1}},
		{broker.DiscardFilter{Kind: "b"}, 2, 2, []int{5, 4, 2}},
		{broker.DiscardFilter{Kind: "b"}, 0, 1, []int{4, 2}},
		{broker.DiscardFilter{}, 0, 2, nil},
		{broker.DiscardFilter{}, 0, 0, nil},
	}
	for _, s := range steps {
		n, err := x.PurgeDiscarded(ctx, q, s.f, s.max)
		if err != nil || n != s.want {
			t.Fatalf("PurgeDiscarded(%+v, max %d) = %d, %v; want %d, nil", s.f, s.max, n, err, s.want)
		}
		var want []string
		for _, i := range s.left {
			want = append(want, msgs[i].ID)
		}
		if got := recordIDs(listAll(t, x, q, 10)); !inOrder(e, q, got, want) && !(split(e.d, q) && s.max > 0) {
			t.Fatalf("after PurgeDiscarded(%+v, max %d): records %v, want %v", s.f, s.max, got, want)
		}
	}
	ExpectNone(t, c, 300*time.Millisecond)
	if s := discardStats(t, x, q); s.Count != 0 || s.DroppedByCount != 0 || s.DroppedByAge != 0 || !s.Oldest.IsZero() {
		t.Fatalf("DiscardStats after purging everything = %+v, want all zero", s)
	}
}

// testDiscardsCountRetention proves the count cap: a queue holding MaxCount
// records drops its oldest when more are discarded, and counts them in
// DroppedByCount (not DroppedByAge).
func testDiscardsCountRetention(t *testing.T, e *env) {
	const q = "dl-count"
	if split(e.d, q) {
		t.Skip("a split queue caps the discard records of each partition (broker/shard)")
	}
	x := discardsOf(t, e.d)
	s := discardStats(t, x, q)
	if s.MaxCount < 3 || s.MaxCount > 1_000_000 {
		t.Fatalf("DiscardStats.MaxCount = %d; the test needs a cap between 3 and 1e6", s.MaxCount)
	}
	now := time.Now()
	old := make([]string, s.MaxCount)
	for i := range old {
		m := NewMessage(q, i)
		old[i] = discardRecord(now.Add(-time.Second), "old", m)
	}
	writeDiscardRecords(t, e, q, old)
	c := Open(t, e.d, q, nil)
	fresh := []*broker.Message{NewMessage(q, s.MaxCount), NewMessage(q, s.MaxCount+1)}
	discardMessages(t, e.d, c, fresh, func(int) string { return "new" })

	if n := discardKeyLen(t, e, q); n != int64(s.MaxCount) {
		t.Fatalf("discard key holds %d records after 2 discards past the cap, want the cap %d", n, s.MaxCount)
	}
	s = discardStats(t, x, q)
	if s.Count != int64(s.MaxCount) || s.DroppedByCount != 2 || s.DroppedByAge != 0 {
		t.Fatalf("DiscardStats = %+v; want Count %d, DroppedByCount 2, DroppedByAge 0", s, s.MaxCount)
	}
	ctx := Context(t, time.Minute)
	page, _, err := x.ListDiscarded(ctx, q, 0, 2)
	if err != nil || !slices.Equal(recordIDs(page), messageIDs(fresh, true)) {
		t.Fatalf("newest records %v, %v; want %v", recordIDs(page), err, messageIDs(fresh, true))
	}
	page, _, err = x.ListDiscarded(ctx, q, s.MaxCount-1, 5)
	if err != nil || len(page) != 1 || page[0].ID != NewMessage(q, 2).ID {
		t.Fatalf("oldest record %v, %v; want %s (the two before it dropped)", recordIDs(page), err, NewMessage(q, 2).ID)
	}
	for i, want := range []bool{false, false, true} {
		id := NewMessage(q, i).ID
		if got, err := x.GetDiscarded(ctx, q, id); err != nil || (got != nil) != want {
			t.Errorf("GetDiscarded(%s) = %v, %v; want found %v", id, got != nil, err, want)
		}
	}
}

// testDiscardsAgeRetention proves the age limit, with records written
// already older than MaxAge (no waiting): the reading calls drop them
// (however many: more than one bounded step), a discard drops them too,
// and both count them in DroppedByAge, not DroppedByCount.
func testDiscardsAgeRetention(t *testing.T, e *env) {
	const q = "dl-age"
	x := discardsOf(t, e.d)
	ctx := Context(t, time.Minute)
	s := discardStats(t, x, q)
	if s.MaxAge <= 0 {
		t.Fatalf("DiscardStats.MaxAge = %v; the suite needs an age limit (the drivers' default is %v)", s.MaxAge, broker.DefaultDiscardMaxAge)
	}
	if s.MaxCount < 300 {
		t.Fatalf("DiscardStats.MaxCount = %d; the test needs a cap of 300 or more", s.MaxCount)
	}
	past := time.Now().Add(-s.MaxAge - time.Hour)
	var recs []string
	for i := range 250 {
		recs = append(recs, discardRecord(past.Add(time.Duration(i)*time.Millisecond), "stale", NewMessage(q, i)))
	}
	young := NewMessage(q, 999)
	recs = append(recs, discardRecord(time.Now().Add(-s.MaxAge/2), "young", young))
	writeDiscardRecords(t, e, q, recs)

	page, total, err := x.ListDiscarded(ctx, q, 0, 1000)
	if got := recordIDs(page); err != nil || total != 1 || !slices.Equal(got, []string{young.ID}) {
		t.Fatalf("ListDiscarded = %d records (first %v), total %d, %v; want only %s (the stale ones are past MaxAge %v)",
			len(got), got[:min(3, len(got))], total, err, young.ID, s.MaxAge)
	}
	if s := discardStats(t, x, q); s.Count != 1 || s.DroppedByAge != 250 || s.DroppedByCount != 0 {
		t.Fatalf("DiscardStats = %+v; want Count 1, DroppedByAge 250, DroppedByCount 0", s)
	}

	// The discarding side: stale records behind a discard go with it.
	if n, err := x.PurgeDiscarded(ctx, q, broker.DiscardFilter{}, 0); err != nil || n != 1 {
		t.Fatalf("PurgeDiscarded = %d, %v; want 1", n, err)
	}
	writeDiscardRecords(t, e, q, recs[:3])
	c := Open(t, e.d, q, nil)
	fresh := NewMessage(q, 1000)
	discardMessages(t, e.d, c, []*broker.Message{fresh}, func(int) string { return "fresh" })
	// (A split queue trims each partition as it writes to it.)
	if n := discardKeyLen(t, e, q); n != 1 && !split(e.d, q) {
		t.Fatalf("discard key holds %d records after a discard behind 3 stale ones, want 1", n)
	}
	if s := discardStats(t, x, q); s.Count != 1 || s.DroppedByAge != 253 || s.DroppedByCount != 0 {
		t.Fatalf("DiscardStats = %+v; want Count 1, DroppedByAge 253, DroppedByCount 0", s)
	}
	if got, err := x.GetDiscarded(ctx, q, fresh.ID); err != nil || got == nil || got.Reason != "fresh" {
		t.Fatalf("GetDiscarded(%s) = %+v, %v; want its record", fresh.ID, got, err)
	}
}

// testDiscardsBounded proves the calls that work through many records
// (each script call a bounded page) cover 2,500 records: listing them page
// by page, re-driving a kind, then up to 1,000, then the rest, and purging.
func testDiscardsBounded(t *testing.T, e *env) {
	const q, n = "dl-bounded", 2500
	x := discardsOf(t, e.d)
	ctx := Context(t, 2*time.Minute)
	if s := discardStats(t, x, q); s.MaxCount < n {
		t.Fatalf("DiscardStats.MaxCount = %d; the test needs %d", s.MaxCount, n)
	}
	c := Open(t, e.d, q, nil)
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
		msgs[i].Kind = []string{"even", "odd"}[i%2]
	}
	for i := 0; i < n; i += 500 {
		discardMessages(t, e.d, c, msgs[i:i+500], func(int) string { return "bulk" })
	}
	if got := recordIDs(listAll(t, x, q, 1000)); !inOrder(e, q, got, messageIDs(msgs, true)) {
		t.Fatalf("ListDiscarded pages hold %d records (first %v), want all %d newest first", len(got), got[:min(3, len(got))], n)
	}

	var odd, even []*broker.Message
	for i, m := range msgs {
		if i%2 == 1 {
			odd = append(odd, m)
		} else {
			even = append(even, m)
		}
	}
	if got, err := x.Redrive(ctx, q, broker.DiscardFilter{Kind: "odd"}, 0); err != nil || got != len(odd) {
		t.Fatalf("Redrive(kind odd) = %d, %v; want %d", got, err, len(odd))
	}
	if got, err := x.Redrive(ctx, q, broker.DiscardFilter{}, 1000); err != nil || got != 1000 {
		t.Fatalf("Redrive(all, max 1000) = %d, %v; want 1000", got, err)
	}
	if s := discardStats(t, x, q); s.Count != int64(len(even)-1000) {
		t.Fatalf("DiscardStats.Count = %d after re-driving %d, want %d", s.Count, len(odd)+1000, len(even)-1000)
	}
	want := append(messageIDs(odd, false), messageIDs(even[:1000], false)...)
	ds := FetchN(t, c, len(want), 1000, 10*time.Second)
	if split(e.d, q) {
		// A split queue's Redrive(max) takes each partition's oldest in
		// turn: every odd one and 1,000 of the even ones.
		var evens []string
		for _, id := range IDs(ds) {
			if !slices.Contains(messageIDs(odd, false), id) {
				evens = append(evens, id)
			}
		}
		want = append(messageIDs(odd, false), evens...)
		if len(evens) != 1000 || !slices.Equal(sortedIDs(slices.Compact(sortedIDs(evens))), sortedIDs(evens)) {
			t.Fatalf("fetched %d even re-driven messages (%d distinct), want 1,000", len(evens), len(slices.Compact(sortedIDs(evens))))
		}
	}
	if got := IDs(ds); !inOrder(e, q, got, want) {
		t.Fatalf("fetched %d re-driven messages, not %d in discard order (first %v)", len(got), len(want), got[:min(3, len(got))])
	}
	for _, d := range ds {
		if d.Retries != 0 || d.Recoveries != 0 {
			t.Fatalf("re-driven %s: Retries %d, Recoveries %d; want 0", d.ID, d.Retries, d.Recoveries)
		}
	}
	if err := c.Ack(ctx, ds...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if got, err := x.PurgeDiscarded(ctx, q, broker.DiscardFilter{}, 0); err != nil || got != len(even)-1000 {
		t.Fatalf("PurgeDiscarded(all) = %d, %v; want %d", got, err, len(even)-1000)
	}
	ExpectNone(t, c, 300*time.Millisecond)
	if s := discardStats(t, x, q); s.Count != 0 {
		t.Fatalf("DiscardStats.Count = %d after the purge, want 0", s.Count)
	}
}
