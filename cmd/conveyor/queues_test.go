package main

import (
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/drivertest"
)

// TestQueues lists a queue with jobs in every state and one with only
// timers, as a table and as JSON, and shows a pause and a resume.
func TestQueues(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		e.Enqueue("later", "mail", "x1", &conveyor.EnqueueOptions{Delay: time.Hour})
		r := e.ok("queues")
		for _, col := range []string{"QUEUE", "DRIVER", "READY", "IN FLIGHT", "DELAYED", "DISCARDED", "PAUSED", "PROCESSED", "FAILED"} {
			if !strings.Contains(r.out, col) {
				t.Errorf("queues table lacks column %s:\n%s", col, r.out)
			}
		}
		// The timers-only queue has no key of its driver's own.
		wantFields(t, r.out, "later", "unknown", "0", "0", "1", "0", "no", "0", "0")
		wantFields(t, r.out, "work", e.driver, "3", "2", "2", "2", "no", "0", "2")

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
		wantFields(t, e.ok("queues").out, "work", e.driver, "3", "2", "2", "2", "yes", "0", "2")
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
		wantFields(t, e.ok("queues").out, "work", e.driver, "3", "2", "2", "2", "no", "0", "2")
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
