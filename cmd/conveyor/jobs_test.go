package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func jobIDs(js []jobOut) []string {
	out := make([]string, len(js))
	for k, j := range js {
		out[k] = j.ID
	}
	return out
}

// TestJobs lists each state as a table and as JSON, in pages.
func TestJobs(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		for _, c := range []struct {
			state  string
			column string
			ids    []string
		}{
			{"ready", "READY SINCE", []string{"r1", "r2", "r3"}},
			{"in-flight", "LEASE", []string{"f1", "f2"}},
			{"in_flight", "LEASE", []string{"f1", "f2"}},
			{"delayed", "DUE", []string{"t1", "t2"}},
			{"discarded", "REASON", []string{"d2", "d1"}},
		} {
			var p pageOut
			e.json(&p, "jobs", "work", "-state", c.state)
			if !slices.Equal(jobIDs(p.Jobs), c.ids) || p.Total != int64(len(c.ids)) || p.NextOffset != nil {
				t.Errorf("jobs -state %s -json: ids %q total %d next %v; want %q, %d, none", c.state, jobIDs(p.Jobs), p.Total, p.NextOffset, c.ids, len(c.ids))
			}
			if p.State != strings.ReplaceAll(c.state, "_", "-") || p.Queue != "work" || p.Limit != 100 {
				t.Errorf("jobs -state %s -json: state %q queue %q limit %d", c.state, p.State, p.Queue, p.Limit)
			}
			r := e.ok("jobs", "work", "-state", c.state)
			if !strings.Contains(r.out, "ID") || !strings.Contains(r.out, c.column) {
				t.Errorf("jobs -state %s: table lacks its header:\n%s", c.state, r.out)
			}
			for _, id := range c.ids {
				if fields(r.out, id) == nil {
					t.Errorf("jobs -state %s: no row for %s:\n%s", c.state, id, r.out)
				}
			}
			if want := "of " + string(rune('0'+len(c.ids))); !strings.Contains(r.errOut, want) {
				t.Errorf("jobs -state %s: stderr %q lacks %q", c.state, r.errOut, want)
			}
		}
		r := e.ok("jobs", "work", "-state", "discarded")
		if f := fields(r.out, "d2"); len(f) < 5 || f[1] != "sms" || f[2] != "1" || strings.Join(f[len(f)-2:], " ") != "boom d2" {
			t.Errorf("discarded row of d2 = %q, want its kind, attempt, when and reason:\n%s", f, r.out)
		}

		// Pages: the hint names the next one, the last has none.
		r = e.ok("jobs", "-limit", "2", "work", "-state", "ready")
		if fields(r.out, "r1") == nil || fields(r.out, "r3") != nil {
			t.Errorf("first page of 2:\n%s", r.out)
		}
		if !strings.Contains(r.errOut, "Jobs 1 to 2 of 3 ready. Next page: conveyor jobs work -state ready -offset 2 -limit 2") {
			t.Errorf("first page hint: %q", r.errOut)
		}
		var p pageOut
		e.json(&p, "jobs", "work", "-state", "ready", "-limit", "2")
		if p.NextOffset == nil || *p.NextOffset != 2 {
			t.Errorf("first page next_offset = %v, want 2", p.NextOffset)
		}
		p = pageOut{}
		e.json(&p, "jobs", "work", "-state", "ready", "-limit", "2", "-offset", "2")
		if !slices.Equal(jobIDs(p.Jobs), []string{"r3"}) || p.NextOffset != nil {
			t.Errorf("second page = %q next %v, want [r3] and none", jobIDs(p.Jobs), p.NextOffset)
		}
		if r := e.ok("jobs", "work", "-state", "ready", "-offset", "2"); strings.Contains(r.errOut, "Next page") {
			t.Errorf("last page has a next-page hint: %q", r.errOut)
		}

		e.fails(2, "-state is required", "jobs", "work")
		e.fails(2, `-state "done"`, "jobs", "work", "-state", "done")
		e.fails(2, "-limit 0", "jobs", "work", "-state", "ready", "-limit", "0")
		e.fails(2, "-limit 1001", "jobs", "work", "-state", "ready", "-limit", "1001")
		e.fails(2, "-offset -1", "jobs", "work", "-state", "ready", "-offset", "-1")
		e.fails(2, "invalid value", "jobs", "work", "-state", "ready", "-limit", "ten")
		e.fails(1, "not found", "jobs", "nosuch", "-state", "ready")
	})
}

// TestJob shows a job of each state, and fails on a job that is not
// there.
func TestJob(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Seed()
		for id, state := range map[string]string{"r2": "ready", "f1": "in-flight", "t1": "delayed", "d1": "discarded"} {
			var j jobOut
			e.json(&j, "job", "work", id)
			if j.ID != id || j.State != state || j.Queue != "work" || j.Payload != `{"id":"`+id+`"}` || j.PayloadEncoding != "text" {
				t.Errorf("job %s -json = %+v, want state %s", id, j, state)
			}
			r := e.ok("job", "work", id)
			wantFields(t, r.out, "State:", state)
			if !strings.Contains(r.out, `"id": "`+id+`"`) {
				t.Errorf("job %s: payload not shown indented:\n%s", id, r.out)
			}
		}
		var j jobOut
		e.json(&j, "job", "work", "d1")
		if j.Reason != "boom d1" || j.DiscardedAt.IsZero() {
			t.Errorf("discarded job: reason %q at %v", j.Reason, j.DiscardedAt)
		}
		e.json(&j, "job", "work", "t2")
		if d := time.Until(j.RunAt); d < 110*time.Minute || d > 2*time.Hour {
			t.Errorf("delayed job due in %v, want about 2h", d)
		}
		if e.driver == "list" {
			e.json(&j, "job", "work", "f1")
			if j.LeaseDeadline.IsZero() {
				t.Error("in-flight job of the list driver without its lease deadline")
			}
		}
		e.fails(1, `job "nosuch" not found in queue "work"`, "job", "work", "nosuch")
		e.fails(1, `job "r1" not found`, "job", "work", "r1", "-state", "delayed")
		e.fails(2, "missing id", "job", "work")
	})
}

// TestFinishedJobs lists the records of finished jobs and shows one: its
// outcome, worker, error (as text) and result.
func TestFinishedJobs(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.SeedFinished()
		var p pageOut
		e.json(&p, "jobs", "done", "-state", "finished")
		if !slices.Equal(jobIDs(p.Jobs), []string{"k1", "k2"}) || p.Total != 2 || p.State != "finished" {
			t.Fatalf("jobs -state finished -json: ids %q total %d state %q; want [k1 k2], 2, finished", jobIDs(p.Jobs), p.Total, p.State)
		}
		if r := p.Jobs[0].Record; r == nil || r.Outcome != "acked" || string(r.Result) != `{"invoice":"INV-1"}` {
			t.Fatalf("k1's record in -json = %+v", r)
		}
		r := e.ok("jobs", "done", "-state", "finished")
		if f := fields(r.out, "k2"); len(f) < 6 || f[1] != "sms" || f[len(f)-2] != "discarded" || f[len(f)-1] != "<script>alert(1)</script>" {
			t.Errorf("finished row of k2 = %q, want its kind, outcome and error:\n%s", f, r.out)
		}
		r = e.ok("job", "done", "k1")
		for _, want := range []string{"State:", "finished", "Outcome:", "acked", "Worker:", "seeder-1", "Kept until:", `"invoice": "INV-1"`} {
			if !strings.Contains(r.out, want) {
				t.Errorf("job done k1 lacks %q:\n%s", want, r.out)
			}
		}
		r = e.ok("job", "done", "k2", "-state", "finished")
		if !strings.Contains(r.out, "Error:") || !strings.Contains(r.out, "<script>alert(1)</script>") {
			t.Errorf("job done k2 lacks its error:\n%s", r.out)
		}
	})
}
