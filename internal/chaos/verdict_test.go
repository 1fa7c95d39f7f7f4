package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// book builds a recorder by hand: calls of one job each, and runs.
type book struct {
	r    *recorder
	t0   time.Time
	runs int
}

func newBook() *book { return &book{r: newRecorder(), t0: time.Now()} }

func (b *book) call(seq int, id string, err error, delay time.Duration) {
	c := &callRec{seqs: []int{seq}, err: err, start: b.t0, end: b.t0.Add(time.Millisecond), delay: delay}
	if err == nil {
		c.ids = []string{id}
	}
	b.r.addCall(c)
}

// run records a run of job id (seq) in incarnation inc that started at
// offset ms, with its delivery counters and outcome.
func (b *book) run(inc, seq int, id string, rec, att int, ms int, done bool, outcome string) {
	b.runs++
	b.r.inc(inc)
	at := b.t0.Add(time.Duration(ms) * time.Millisecond)
	b.r.start(&runRec{inc: inc, r: b.runs, id: id, seq: seq, rec: rec, att: att, startNs: at.UnixNano(), start: at,
		done: done, outcome: outcome, finish: at.Add(time.Millisecond)})
}

func (b *book) kill(inc int, ms int) {
	b.r.inc(inc).killed = b.t0.Add(time.Duration(ms) * time.Millisecond)
	b.r.addFault(fault{kind: "kill", inc: inc, end: b.t0.Add(time.Duration(ms) * time.Millisecond)})
}

func (b *book) stop(inc int) {
	i := b.r.inc(inc)
	i.stopped, i.exited = true, true
}

var drained = endState{drained: true}

func TestKillExplainsARunAgain(t *testing.T) {
	b := newBook()
	b.call(0, "a", nil, 0)
	b.run(1, 0, "a", 0, 0, 10, true, "") // finished, killed before its ack
	b.kill(1, 20)
	b.run(2, 0, "a", 1, 0, 1200, true, "acked")
	b.stop(2)
	v := judge(b.r, rules{explains: map[string]bool{"kill": true}}, drained)
	if v.lost != 0 || v.dupRuns != 1 || v.explained["kill"] != 1 || v.unexplained != 0 || v.dupSingle != 0 {
		t.Fatalf("verdict %+v", v)
	}
	if fs := v.failures(); len(fs) != 0 {
		t.Fatalf("failures %v", fs)
	}
	if v.recovery != 1180*time.Millisecond {
		t.Fatalf("recovery %v, want 1.18s (from the kill until the job started again)", v.recovery)
	}
	if !strings.HasSuffix(v.line(), " PASS") {
		t.Fatalf("line %q", v.line())
	}
}

func TestAKillIsNoExcuseWhereNoneHappened(t *testing.T) {
	b := newBook()
	b.call(0, "a", nil, 0)
	b.run(1, 0, "a", 0, 0, 10, false, "unsettled")
	b.run(2, 0, "a", 1, 0, 1200, true, "acked")
	b.stop(1)
	b.stop(2)
	v := judge(b.r, rules{explains: map[string]bool{"kill": true}}, drained)
	if v.unexplained != 1 || !strings.Contains(v.line(), "FAIL (unexplained duplicates)") {
		t.Fatalf("line %q", v.line())
	}
}

func TestTwoCopiesOfOneCall(t *testing.T) {
	b := newBook()
	b.call(0, "a", nil, 0)
	b.run(1, 0, "a", 0, 0, 10, true, "acked")
	b.run(2, 0, "a", 0, 0, 11, true, "lease_lost") // the same job, a second first delivery
	b.call(1, "b", nil, 0)
	b.run(1, 1, "b", 0, 0, 10, true, "acked")
	b.run(2, 1, "b", 1, 0, 900, true, "acked") // after an ack: a second copy
	b.stop(1)
	b.stop(2)
	v := judge(b.r, rules{explains: map[string]bool{"lease_lost": true}}, drained)
	if v.dupSingle != 2 {
		t.Fatalf("dup_single_call %d, want 2: %s", v.dupSingle, v.line())
	}
}

func TestLostAndWaiting(t *testing.T) {
	b := newBook()
	b.call(0, "gone", nil, 0)
	b.call(1, "stuck", nil, 0)
	v := judge(b.r, rules{}, endState{drained: false, left: 1, stored: "1,0,0,0,5:stuck..."})
	if v.lost != 1 || v.waiting != 1 || v.enqueued != 2 || v.processed != 0 {
		t.Fatalf("verdict %s", v.line())
	}
}

func TestAnswersThatLied(t *testing.T) {
	b := newBook()
	dup := &broker.DuplicateError{Queue: "q", ID: "a", Key: "u0"}
	b.call(0, "", dup, 0)
	b.run(1, 0, "a", 0, 0, 10, true, "acked")
	b.call(1, "", errors.New("dial tcp: connection reset"), 0) // outcome unknown: allowed to run
	b.run(1, 1, "b", 0, 0, 10, true, "acked")
	b.call(2, "c", nil, 0)
	b.run(1, 2, "c", 0, 0, 10, true, "lease_lost") // it landed: nothing ran it again
	b.stop(1)
	v := judge(b.r, rules{}, drained)
	if v.refusedButRan != 1 || v.unknownRan != 1 || v.misreported != 1 {
		t.Fatalf("verdict %s", v.line())
	}
}

func TestEarlyAndLate(t *testing.T) {
	b := newBook()
	b.call(0, "early", nil, time.Second)
	b.run(1, 0, "early", 0, 0, 500, true, "acked")
	b.call(1, "late", nil, time.Second)
	b.run(1, 1, "late", 0, 0, 4001, true, "acked")
	b.stop(1)
	v := judge(b.r, rules{lateBound: 2 * time.Second}, drained)
	// Start times are whole milliseconds.
	if v.early != 1 || v.lateMax <= 2990*time.Millisecond || v.lateMax > 3*time.Second {
		t.Fatalf("early %d late_max %v: %s", v.early, v.lateMax, v.line())
	}
	if !strings.Contains(v.line(), "FAIL (early, late)") {
		t.Fatalf("line %q", v.line())
	}
}

func TestRefusal(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{broker.ErrDuplicate, true},
		{redis.ErrClosed, false},
		{errors.New("read tcp: i/o timeout"), false},
	} {
		if got := refusal(c.err); got != c.want {
			t.Errorf("refusal(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestGroupsRunOneAtATimeInOrder: jobs of one FIFO group whose runs
// overlap or interleave (one ran during another's retry), or that started
// against the order their Enqueue calls returned nil in, fail the verdict;
// a killed run ends at its kill.
func TestGroupsRunOneAtATimeInOrder(t *testing.T) {
	type span struct{ seq, inc, from, to int } // ms; to < 0: no return (killed at -to)
	cases := []struct {
		name             string
		runs             []span
		failedCall       int // the seq whose call returned an error, or -1
		overlap, reorder int
	}{
		{"one at a time, in order", []span{{0, 1, 0, 10}, {1, 1, 12, 20}, {2, 2, 25, 30}}, -1, 0, 0},
		{"at once", []span{{0, 1, 0, 10}, {1, 2, 5, 20}, {2, 2, 25, 30}}, -1, 1, 0},
		{"during another's retry", []span{{0, 1, 0, 5}, {1, 2, 8, 12}, {0, 1, 20, 24}, {2, 2, 25, 30}}, -1, 1, 0},
		{"against enqueue order", []span{{0, 1, 6, 10}, {1, 2, 0, 4}, {2, 2, 25, 30}}, -1, 0, 1},
		{"against the order of a call that failed", []span{{0, 1, 6, 10}, {1, 2, 0, 4}, {2, 2, 25, 30}}, 0, 0, 0},
		{"a run killed before the next started", []span{{0, 1, 0, -10}, {0, 2, 12, 15}, {1, 2, 16, 20}, {2, 2, 25, 30}}, -1, 0, 0},
		{"the next started before the kill", []span{{0, 1, 0, -10}, {0, 2, 12, 15}, {1, 2, 8, 20}, {2, 2, 25, 30}}, -1, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBook()
			for seq := 0; seq < 3; seq++ {
				at := b.t0.Add(time.Duration(seq) * time.Millisecond)
				c := &callRec{seqs: []int{seq}, ids: []string{string(rune('a' + seq))}, start: at, end: at.Add(time.Millisecond / 2)}
				if seq == tc.failedCall {
					c.ids, c.err = nil, errors.New("i/o timeout")
				}
				b.r.addCall(c)
				b.r.addPlan(seq, plan{group: "g"})
			}
			ns := func(ms int) int64 { return b.t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
			for _, s := range tc.runs {
				b.runs++
				b.r.inc(s.inc)
				run := &runRec{inc: s.inc, r: b.runs, id: string(rune('a' + s.seq)), seq: s.seq, startNs: ns(s.from),
					start: b.t0.Add(time.Duration(s.from) * time.Millisecond), done: true, outcome: "acked"}
				if s.to >= 0 {
					run.endNs = ns(s.to)
				} else {
					run.done, run.outcome = false, ""
					b.r.inc(s.inc).killed = time.Unix(0, ns(-s.to))
				}
				b.r.start(run)
			}
			v := judge(b.r, rules{explains: map[string]bool{"kill": true}}, drained)
			if v.grouped != 3 || v.groupOverlaps != tc.overlap || v.groupOutOfOrder != tc.reorder {
				t.Fatalf("grouped %d, overlaps %d, out of order %d; want 3, %d, %d (notes %q)", v.grouped, v.groupOverlaps, v.groupOutOfOrder, tc.overlap, tc.reorder, v.notes)
			}
			failing := strings.Contains(v.line(), "group_overlap") || strings.Contains(v.line(), "group_order")
			if failing != (tc.overlap+tc.reorder > 0) {
				t.Fatalf("line %q", v.line())
			}
		})
	}
}

// TestOverLimit: more runs at once than the queue's concurrency limit fail
// the verdict; a run that ends as another starts does not overlap it, and a
// killed run ends at its kill.
func TestOverLimit(t *testing.T) {
	b := newBook()
	spans := [][3]int{{0, 0, 10}, {1, 10, 20}, {2, 5, -12}, {3, 13, 30}} // seq, from, to (ms; -to: killed)
	for i, sp := range spans {
		b.r.addCall(&callRec{seqs: []int{sp[0]}, ids: []string{string(rune('a' + i))}, start: b.t0, end: b.t0})
		inc := i + 1
		b.r.inc(inc)
		run := &runRec{inc: inc, r: i + 1, id: string(rune('a' + i)), seq: sp[0], startNs: b.t0.Add(time.Duration(sp[1]) * time.Millisecond).UnixNano(),
			start: b.t0, done: true, outcome: "acked"}
		if sp[2] >= 0 {
			run.endNs = b.t0.Add(time.Duration(sp[2]) * time.Millisecond).UnixNano()
		} else {
			run.done, run.outcome = false, ""
			b.r.inc(inc).killed = b.t0.Add(time.Duration(-sp[2]) * time.Millisecond)
		}
		b.r.start(run)
	}
	v := judge(b.r, rules{explains: map[string]bool{"kill": true}}, drained)
	if v.runningMax != 2 {
		t.Fatalf("most at once %d, want 2 (0-10 and 5-12, then 10-20 and 5-12, then 13-30 and 10-20)", v.runningMax)
	}
	for limit, over := range map[int]bool{1: true, 2: false} {
		v.limit = limit
		if got := strings.Contains(v.line(), "over_limit"); got != over {
			t.Fatalf("limit %d: line %q", limit, v.line())
		}
	}
}
