package main

import (
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// TestLimit sets a kind's limit and the queue's, lists them with the jobs
// running and waiting under each, as a table and as JSON, removes one, and
// refuses bad values.
func TestLimit(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Enqueue("work", "slow", "s1", nil)
		e.Enqueue("work", "slow", "s2", nil)
		e.Enqueue("work", "fast", "f1", nil)
		if r := e.ok("limit", "work", "-kind", "slow", "-max", "1"); !strings.Contains(r.out, `At most 1 jobs of kind "slow" of queue "work" run at once.`) {
			t.Errorf("limit -max says %q", r.out)
		}
		e.ok("limit", "work", "-max", "10")
		// A consumer takes what it may: one slow job runs, one waits.
		c, err := e.d.Open(e.ctx, "work", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(e.ctx)
		got := 0
		for got < 2 {
			ds, err := c.Fetch(e.ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			got += len(ds)
		}
		r := e.ok("limit", "work")
		wantFields(t, r.out, "(queue)", "10", "2", "0")
		wantFields(t, r.out, "slow", "1", "1", "1")
		var out struct {
			Queue  string
			Limits []broker.Limit
		}
		e.json(&out, "limit", "work")
		want := []broker.Limit{{Kind: "", Max: 10, Running: 2}, {Kind: "slow", Max: 1, Running: 1, Waiting: 1}}
		if out.Queue != "work" || len(out.Limits) != 2 || out.Limits[0] != want[0] || out.Limits[1] != want[1] {
			t.Errorf("limit -json = %+v, want %+v", out, want)
		}
		wantFields(t, e.ok("stats", "work").out, "Waiting", "for", "a", "limit:", "1")

		if r := e.ok("limit", "work", "-max", "0"); !strings.Contains(r.out, `Removed the limit of queue "work".`) {
			t.Errorf("limit -max 0 says %q", r.out)
		}
		e.fails(1, "out of range", "limit", "work", "-max", "-3")
		e.fails(1, "white space", "limit", "work", "-kind", "a b", "-max", "3")
	})
}
