package main

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/history"
)

// TestQueues lists a queue with jobs in every state and one with only
// timers, as a table and as JSON, and shows a pause and a resume.
func TestQueues(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		e.Enqueue("later", "mail", "x1", &conveyor.EnqueueOptions{Delay: time.Hour})
		r := e.ok("queues")
		for _, col := range []string{"QUEUE", "DRIVER", "READY", "IN FLIGHT", "DELAYED", "DISCARDED", "PAUSED", "PROCESSED", "FAILED", "PROCESSED/MIN", "FAILED/MIN"} {
			if !strings.Contains(r.out, col) {
				t.Errorf("queues table lacks column %s:\n%s", col, r.out)
			}
		}
		// The timers-only queue has no key of its driver's own.
		wantFields(t, r.out, "later", "unknown", "0", "0", "1", "0", "no", "0", "0", "-", "-")
		wantFields(t, r.out, "work", e.driver, "3", "2", "2", "2", "no", "0", "2", "-", "-")

		var got struct{ Queues []queueOut }
		e.json(&got, "queues")
		want := []queueOut{
			{Queue: "later", Driver: "unknown", Delayed: 1},
			{Queue: "work", Driver: e.driver, Ready: 3, InFlight: 2, Delayed: 2, Discarded: 2, Failed: 2},
		}
		if len(got.Queues) != len(want) {
			t.Fatalf("queues -json = %+v, want %+v", got.Queues, want)
		}
		for k := range want {
			if got.Queues[k] != want[k] {
				t.Errorf("queues -json [%d] = %+v, want %+v", k, got.Queues[k], want[k])
			}
		}

		if r := e.ok("pause", "work"); !strings.Contains(r.out, `Paused queue "work"`) {
			t.Errorf("pause says %q", r.out)
		}
		wantFields(t, e.ok("queues").out, "work", e.driver, "3", "2", "2", "2", "yes", "0", "2", "-", "-")
		e.json(&got, "queues")
		if !got.Queues[1].Paused || got.Queues[0].Paused {
			t.Errorf("after pause work: paused %v, %v; want later no, work yes", got.Queues[0].Paused, got.Queues[1].Paused)
		}
		var p struct {
			Queue  string
			Paused bool
		}
		e.json(&p, "resume", "work")
		if p.Queue != "work" || p.Paused {
			t.Errorf("resume -json = %+v", p)
		}
		wantFields(t, e.ok("queues").out, "work", e.driver, "3", "2", "2", "2", "no", "0", "2", "-", "-")
	})
}

func TestQueuesEmpty(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "list")
	r := e.ok("queues")
	if r.out != "" || !strings.Contains(r.errOut, "No queues under prefix") {
		t.Errorf("queues of an empty prefix: stdout %q, stderr %q", r.out, r.errOut)
	}
	var got struct{ Queues []queueOut }
	e.json(&got, "queues")
	if got.Queues == nil || len(got.Queues) != 0 {
		t.Errorf("queues -json of an empty prefix = %#v, want an empty list", got.Queues)
	}
}

// TestStats shows one queue in depth, and refuses an unknown or invalid
// queue.
func TestStats(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		r := e.ok("stats", "work")
		for _, line := range [][]string{
			{"Queue:", "work"}, {"Driver:", e.driver}, {"Paused:", "no"}, {"Ready:", "3"}, {"In", "flight:", "2"},
			{"Delayed:", "2"}, {"Discarded:", "2"}, {"Failed:", "2"}, {"Discard", "records:", "2"},
		} {
			wantFields(t, r.out, line...)
		}
		for _, want := range []string{"Next ready:", "r1 (mail)", "Next timer:", "t1 (mail), due in 1h", "Last discarded:", "d2 (sms)", ": boom d2", "Oldest in flight:", "f1 (mail)"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("stats lacks %q:\n%s", want, r.out)
			}
		}
		var s statsOut
		e.json(&s, "stats", "work")
		if s.Queue != "work" || s.Driver != e.driver || s.Ready != 3 || s.InFlight != 2 || s.Delayed != 2 || s.Discarded != 2 || s.Failed != 2 {
			t.Errorf("stats -json = %+v", s.queueOut)
		}
		if s.Discards.Count != 2 || s.Discards.Oldest.IsZero() {
			t.Errorf("stats -json discards = %+v", s.Discards)
		}
		for name, c := range map[string]struct {
			j     *jobOut
			id    string
			state string
		}{
			"next_ready": {s.NextReady, "r1", "ready"}, "oldest_in_flight": {s.OldestLeased, "f1", "in-flight"},
			"next_delayed": {s.NextDelayed, "t1", "delayed"}, "last_discarded": {s.LastDiscarded, "d2", "discarded"},
		} {
			if c.j == nil || c.j.ID != c.id || c.j.State != c.state {
				t.Errorf("stats -json %s = %+v, want %s in state %s", name, c.j, c.id, c.state)
			}
		}
		if s.LastDiscarded != nil && s.LastDiscarded.Reason != "boom d2" {
			t.Errorf("last discard reason %q", s.LastDiscarded.Reason)
		}
		e.fails(1, `queue "nosuch" not found under prefix`, "stats", "nosuch")
		e.fails(2, "invalid queue name", "stats", "bad{queue}")
		e.fails(2, "missing queue", "stats")
		e.fails(2, "unexpected arguments", "stats", "work", "extra")
		e.fails(1, `queue "nosuch" not found`, "pause", "nosuch")
	})
}

// TestDriverFlag: -driver is checked against what a queue's keys say.
func TestDriverFlag(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Enqueue("work", "mail", "r1", nil)
		other := map[string]string{"list": "stream", "stream": "list"}[e.driver]
		e.fails(2, "is a "+e.driver+" queue", "stats", "work", "-driver", other)
		var s statsOut
		e.json(&s, "stats", "work", "-driver", e.driver)
		if s.Driver != e.driver || s.Ready != 1 {
			t.Errorf("stats -driver %s = %+v", e.driver, s.queueOut)
		}
		e.fails(2, `-driver "redis"`, "queues", "-driver", "redis")
	})
}

// TestQueuesMixedDrivers: queues of both drivers under one prefix are each
// read by their own driver.
func TestQueuesMixedDrivers(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "list")
	st, _ := drivertest.Named("stream")
	sd := st.Must(t, e.rdb, e.prefix)
	sc, err := conveyor.NewClient(sd, &conveyor.ClientConfig{DefaultQueue: "s"})
	if err != nil {
		t.Fatal(err)
	}
	e.Enqueue("l", "k", "l1", nil)
	for _, id := range []string{"s1", "s2"} {
		if _, err := sc.Enqueue(e.ctx, "k", nil, &conveyor.EnqueueOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	var got struct{ Queues []queueOut }
	e.json(&got, "queues")
	want := []queueOut{{Queue: "l", Driver: "list", Ready: 1}, {Queue: "s", Driver: "stream", Ready: 2}}
	if len(got.Queues) != 2 || got.Queues[0] != want[0] || got.Queues[1] != want[1] {
		t.Errorf("queues -json = %+v, want %+v", got.Queues, want)
	}
}

// sample is one entry of a queue's history: its cumulative counters at a
// time.
type sample struct {
	at                time.Time
	processed, failed int64
}

// addHistory writes samples to queue's history as its keeper would have
// taken them at their times (internal/history/lua/record.lua's format):
// RecordSample stamps the server's time, and a test cannot wait minutes.
func (e *cliEnv) addHistory(queue string, samples ...sample) {
	e.t.Helper()
	for _, s := range samples {
		err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{
			Stream: history.Key(e.prefix, queue),
			ID:     fmt.Sprintf("%d-0", s.at.UnixMilli()),
			Values: []any{"r", 1, "f", 0, "d", 0, "x", 0, "g", 0, "l", 0, "p", s.processed, "e", s.failed},
		}).Err()
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// wantRate checks a rate of the JSON output.
func wantRate(t *testing.T, name string, got *rateOut, processed, failed float64, span time.Duration, last time.Time) {
	t.Helper()
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if got == nil {
		t.Errorf("%s is absent, want %v processed/min, %v failed/min over %v", name, processed, failed, span)
		return
	}
	if !near(got.ProcessedPerMin, processed) || !near(got.FailedPerMin, failed) || !near(got.SpanSeconds, span.Seconds()) || !got.LastSample.Equal(last) {
		t.Errorf("%s = %+v, want %v processed/min, %v failed/min, span %v, last sample %v", name, *got, processed, failed, span, last.UTC())
	}
}

// TestQueuesRates: queues shows the rates over the last 5 minutes of each
// queue's history, and "-" (no rate in JSON) for a queue without two
// samples in that window.
func TestQueuesRates(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		for _, q := range []string{"busy", "idle", "slow", "stale", "young"} {
			e.Enqueue(q, "mail", q+"1", nil)
		}
		// The newest samples are 10 s old: well within a sample interval.
		last := time.UnixMilli(time.Now().Add(-10 * time.Second).UnixMilli())
		e.addHistory("busy",
			// Older than 5 minutes before the newest: outside the window
			// (with it, processed would be 1200 over 5m30s).
			sample{last.Add(-5*time.Minute - 30*time.Second), 0, 0},
			sample{last.Add(-2 * time.Minute), 0, 0},
			sample{last.Add(-time.Minute), 600, 5},
			sample{last, 1200, 10})
		e.addHistory("slow", sample{last.Add(-3 * time.Minute), 10, 7}, sample{last, 12, 8})
		e.addHistory("young", sample{last, 50, 1})
		// Two samples, but 20 minutes old: no pool has sampled the queue
		// since.
		e.addHistory("stale", sample{last.Add(-21 * time.Minute), 0, 0}, sample{last.Add(-20 * time.Minute), 600, 0})

		r := e.ok("queues")
		wantFields(t, r.out, "busy", e.driver, "1", "0", "0", "0", "no", "0", "0", "600", "5.0")
		wantFields(t, r.out, "slow", e.driver, "1", "0", "0", "0", "no", "0", "0", "0.7", "0.3")
		for _, q := range []string{"idle", "stale", "young"} {
			wantFields(t, r.out, q, e.driver, "1", "0", "0", "0", "no", "0", "0", "-", "-")
		}

		var got struct{ Queues []queueOut }
		e.json(&got, "queues")
		rates := map[string]*rateOut{}
		for _, q := range got.Queues {
			rates[q.Queue] = q.Rate5m
		}
		wantRate(t, "busy rate_5m", rates["busy"], 600, 5, 2*time.Minute, last)
		// Rounded to thousandths.
		wantRate(t, "slow rate_5m", rates["slow"], 0.667, 0.333, 3*time.Minute, last)
		for _, q := range []string{"idle", "stale", "young"} {
			if r, ok := rates[q]; !ok || r != nil {
				t.Errorf("%s: rate_5m = %+v (listed %v), want the queue listed without a rate", q, r, ok)
			}
		}
		// A queue without a rate leaves the field out rather than null.
		if n := strings.Count(e.ok("queues", "-json").out, `"rate_5m"`); n != 2 {
			t.Errorf("queues -json has rate_5m %d times, want 2 (busy, slow)", n)
		}
	})
}

// TestStatsRates: stats shows the rates over the last 5 minutes and the
// last hour of a queue's history, each with the span its samples cover,
// and says when there are too few samples or the newest is old.
func TestStatsRates(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		for _, q := range []string{"work", "stale", "idle"} {
			e.Enqueue(q, "mail", q+"1", nil)
		}
		last := time.UnixMilli(time.Now().Add(-10 * time.Second).UnixMilli())
		// 4 minutes of samples in the last 5, and one 40 minutes old.
		e.addHistory("work",
			sample{last.Add(-40 * time.Minute), 0, 0},
			sample{last.Add(-4 * time.Minute), 3600, 0},
			sample{last.Add(-2 * time.Minute), 4800, 20},
			sample{last, 6000, 40})
		// Its newest samples are 2 minutes apart, but 20 minutes old.
		e.addHistory("stale",
			sample{last.Add(-30 * time.Minute), 0, 0},
			sample{last.Add(-22 * time.Minute), 600, 3},
			sample{last.Add(-20 * time.Minute), 1000, 5})

		out := e.ok("stats", "work").out
		for _, want := range []string{
			`(?m)^Rate \(5 min\): +600 processed/min, 10\.0 failed/min, over the last 4m0s$`,
			`(?m)^Rate \(1 hour\): +150 processed/min, 1\.0 failed/min, over the last 40m0s$`,
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("stats work lacks a line matching %s:\n%s", want, out)
			}
		}
		var s statsOut
		e.json(&s, "stats", "work")
		wantRate(t, "work rate_5m", s.Rate5m, 600, 10, 4*time.Minute, last)
		wantRate(t, "work rate_1h", s.Rate1h, 150, 1, 40*time.Minute, last)

		// The newest sample is 20 minutes old: no rate over the last 5
		// minutes, and the hour's says where its span ends.
		out = e.ok("stats", "stale").out
		if !regexp.MustCompile(`(?m)^Rate \(5 min\): +- \(fewer than two samples`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^Rate \(1 hour\): +100 processed/min, 0\.5 failed/min, over 10m0s up to 20m\d+s ago$`).MatchString(out) {
			t.Errorf("stats stale:\n%s", out)
		}
		e.json(&s, "stats", "stale")
		if s.Rate5m != nil {
			t.Errorf("stale rate_5m = %+v, want none", *s.Rate5m)
		}
		wantRate(t, "stale rate_1h", s.Rate1h, 100, 0.5, 10*time.Minute, last.Add(-20*time.Minute))

		out = e.ok("stats", "idle").out
		if n := strings.Count(out, "- (fewer than two samples in its history"); n != 2 {
			t.Errorf("stats idle says 'fewer than two samples' %d times, want 2:\n%s", n, out)
		}
		e.json(&s, "stats", "idle")
		if s.Rate5m != nil || s.Rate1h != nil {
			t.Errorf("idle rates = %+v, %+v, want none", s.Rate5m, s.Rate1h)
		}
	})
}
