package brokertest

import (
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

func keepsHistory(c broker.Capabilities) bool { return c.History && c.AtLeastOnce }

// historian returns e's driver as a broker.Historian and broker.Inspector.
func historian(t *testing.T, e *env) (broker.Historian, broker.Inspector) {
	t.Helper()
	h, ok := e.d.(broker.Historian)
	insp, ok2 := e.d.(broker.Inspector)
	if !ok || !ok2 {
		t.Fatalf("driver %T has Capabilities.History but is not a broker.Historian and a broker.Inspector", e.d)
	}
	return h, insp
}

// record records s and fails t on error.
func record(t *testing.T, h broker.Historian, s broker.QueueSizes, every, keep time.Duration) broker.Recorded {
	t.Helper()
	r, err := h.RecordSample(Context(t, 10*time.Second), s, every, keep)
	if err != nil {
		t.Fatalf("RecordSample(%q, %v, %v): %v", s.Queue, every, keep, err)
	}
	if r.Next <= 0 || r.Next > every {
		t.Fatalf("RecordSample: next interval in %v, want within (0, %v]", r.Next, every)
	}
	return r
}

// history reads queue's samples since and fails t on error.
func history(t *testing.T, h broker.Historian, queue string, since time.Time) []broker.Sample {
	t.Helper()
	s, err := h.History(Context(t, 10*time.Second), queue, since)
	if err != nil {
		t.Fatalf("History(%q): %v", queue, err)
	}
	return s
}

// testHistoryRecord proves that a sample stores the queue's sizes and
// counters as read, once per interval: a second sample of the same
// interval (another keeper's) is not stored, and History returns what was
// stored, from the time asked.
func testHistoryRecord(t *testing.T, e *env) {
	const q = "history-record"
	h, insp := historian(t, e)
	ctx := Context(t, 20*time.Second)
	c := Open(t, e.d, q, &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	Enqueue(t, e.d, NewMessage(q, 1), NewMessage(q, 2), NewMessage(q, 3), NewMessage(q, 4))
	ds := FetchN(t, c, 2, 2, 5*time.Second)
	if err := c.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	s := sizesOf(t, insp, q)
	if s.Ready != 2 || s.InFlight != 1 || s.Processed != 1 {
		t.Fatalf("sizes %+v, want 2 ready, 1 in flight, 1 processed", s)
	}
	const every, keep = time.Hour, 2 * time.Hour
	first := record(t, h, s, every, keep)
	if !first.Stored {
		t.Fatal("the first sample of an interval was not stored")
	}
	if first.At.UnixMilli()%every.Milliseconds() != 0 {
		t.Fatalf("sample at %v: not the start of an interval of %v", first.At, every)
	}
	// A second keeper's sample of the same interval is not stored; only
	// when the interval ended between the two calls is it a new one.
	other := s
	other.Ready = 99
	second := record(t, h, other, every, keep)
	if second.At.Equal(first.At) == second.Stored {
		t.Fatalf("second sample %+v after %+v: stored must be false within one interval, true in the next", second, first)
	}
	got := history(t, h, q, time.Time{})
	if len(got) == 0 || !got[0].At.Equal(first.At) {
		t.Fatalf("History = %+v, want the sample at %v first", got, first.At)
	}
	want := broker.Sample{At: first.At, Ready: 2, InFlight: 1, Processed: 1}
	if got[0] != want {
		t.Fatalf("History[0] = %+v, want %+v", got[0], want)
	}
	if len(got) != 1+map[bool]int{true: 1}[second.Stored] {
		t.Fatalf("History holds %d samples after stored %v, %v", len(got), first.Stored, second.Stored)
	}
	if late := history(t, h, q, first.At.Add(time.Millisecond)); len(late) != len(got)-1 {
		t.Fatalf("History since after the first sample = %+v, want it left out", late)
	}
	if none := history(t, h, "history-none", time.Time{}); len(none) != 0 {
		t.Fatalf("History of a queue without samples = %+v, want none", none)
	}
}

// testHistoryRetention proves that samples older than the retention are
// dropped as new ones come.
func testHistoryRetention(t *testing.T, e *env) {
	const q = "history-retention"
	h, insp := historian(t, e)
	Enqueue(t, e.d, NewMessage(q, 1))
	s := sizesOf(t, insp, q)
	const every, keep = time.Second, time.Second
	first := record(t, h, s, every, keep)
	// Sample each interval, waiting for the next by the server's clock,
	// until one starts two intervals after the first.
	r := first
	for r.At.Sub(first.At) < 2*every {
		<-time.After(r.Next)
		r = record(t, h, s, every, keep)
	}
	got := history(t, h, q, time.Time{})
	if len(got) == 0 || !got[len(got)-1].At.Equal(r.At) {
		t.Fatalf("History = %+v, want the newest sample at %v last", got, r.At)
	}
	for _, x := range got {
		if x.At.Before(r.At.Add(-keep)) {
			t.Fatalf("History = %+v: the sample at %v is older than the retention of %v before %v", got, x.At, keep, r.At)
		}
	}
}

// testHistoryInvalid proves that bad intervals and names are refused.
func testHistoryInvalid(t *testing.T, e *env) {
	h, _ := historian(t, e)
	ctx := Context(t, 10*time.Second)
	s := broker.QueueSizes{Queue: "history-invalid"}
	for _, c := range []struct{ every, keep time.Duration }{
		{0, time.Hour}, {time.Millisecond, time.Hour}, {time.Minute, time.Second}, {time.Second + time.Microsecond, time.Hour},
	} {
		if _, err := h.RecordSample(ctx, s, c.every, c.keep); err == nil {
			t.Errorf("RecordSample with interval %v and retention %v: nil error", c.every, c.keep)
		}
	}
	if _, err := h.RecordSample(ctx, broker.QueueSizes{Queue: "a b"}, time.Minute, time.Hour); err == nil {
		t.Error("RecordSample of queue \"a b\": nil error")
	}
	if _, err := h.History(ctx, "", time.Time{}); err == nil {
		t.Error("History of queue \"\": nil error")
	}
}
