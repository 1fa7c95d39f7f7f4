package main

import (
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
)

// cronFire stores the fire of series at at in queue, as a delay.Cron does.
func cronFire(t *testing.T, e *cliEnv, queue, series string, at time.Time) {
	t.Helper()
	m := &broker.Message{ID: delay.FireID(series, at), Kind: "report", Queue: queue, RunAt: at, EnqueuedAt: time.Now()}
	if ok, err := e.d.(broker.Timers).EnqueueFire(e.ctx, series, m, time.Hour); err != nil || !ok {
		t.Fatalf("EnqueueFire(%s) = %v, %v", series, ok, err)
	}
}

// TestCronLs shows series by name: one with a fire stored ahead, one whose
// last fire ran, and one Redis has no record of.
func TestCronLs(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Enqueue("work", "mail", "r1", nil)
		timers := e.d.(broker.Timers)
		fire := func(series string, at time.Time) {
			t.Helper()
			cronFire(t, e, "work", series, at)
		}
		next := time.Now().Add(30 * time.Second).Truncate(time.Millisecond)
		fire("ahead", next)
		last := time.Now().Add(-time.Second).Truncate(time.Millisecond)
		fire("ran", last)
		// Promote the due fire, as a pool's promoter does.
		if _, err := timers.Promote(e.ctx, "work", 10); err != nil {
			t.Fatal(err)
		}

		var got struct {
			Queue  string
			Series []seriesOut
		}
		e.json(&got, "cron", "ls", "work", "ahead", "ran", "never")
		want := []seriesOut{
			{Name: "ahead", Recorded: true, NextFire: next.UTC()},
			{Name: "ran", Recorded: true, LastFire: last.UTC()},
			{Name: "never"},
		}
		if len(got.Series) != 3 {
			t.Fatalf("cron ls -json = %+v", got)
		}
		for k := range want {
			g, w := got.Series[k], want[k]
			if g.Name != w.Name || g.Recorded != w.Recorded || !g.NextFire.Equal(w.NextFire) || !g.LastFire.Equal(w.LastFire) {
				t.Errorf("series %d = %+v, want %+v", k, g, w)
			}
		}
		r := e.ok("cron", "ls", "work", "ahead", "ran", "never")
		if f := fields(r.out, "ahead"); len(f) < 2 || f[1] != "-" || !strings.Contains(strings.Join(f, " "), "(in ") {
			t.Errorf("ahead row = %q:\n%s", f, r.out)
		}
		if f := fields(r.out, "ran"); !strings.Contains(strings.Join(f, " "), "ago) not stored yet") {
			t.Errorf("ran row = %q:\n%s", f, r.out)
		}
		if f := fields(r.out, "never"); !strings.Contains(strings.Join(f, " "), "no record") {
			t.Errorf("never row = %q:\n%s", f, r.out)
		}
		e.fails(2, "missing queue", "cron", "ls")
		e.fails(2, `unknown cron command "list"`, "cron", "list", "work", "a")
		e.fails(2, `series "a b"`, "cron", "ls", "work", "a b")
		e.fails(1, "not found", "cron", "ls", "nosuch", "a")
	})
}

// TestCronLsAll: without series names, cron ls shows every series of the
// queue that stored a fire, sorted by name, each with its next or last
// fire, and none of another queue's; a queue without series shows none.
func TestCronLsAll(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Enqueue("work", "mail", "r1", nil)
		e.Enqueue("quiet", "mail", "r2", nil)
		next := time.Now().Add(30 * time.Second).Truncate(time.Millisecond)
		last := time.Now().Add(-time.Second).Truncate(time.Millisecond)
		cronFire(t, e, "work", "zeta", next)
		cronFire(t, e, "work", "alpha", last)
		cronFire(t, e, "work", "mid", next.Add(time.Second))
		cronFire(t, e, "other", "elsewhere", next)
		if _, err := e.d.(broker.Timers).Promote(e.ctx, "work", 10); err != nil { // alpha's fire runs
			t.Fatal(err)
		}

		var got struct {
			Queue  string
			Series []seriesOut
		}
		e.json(&got, "cron", "ls", "work")
		want := []seriesOut{
			{Name: "alpha", Recorded: true, LastFire: last.UTC()},
			{Name: "mid", Recorded: true, NextFire: next.Add(time.Second).UTC()},
			{Name: "zeta", Recorded: true, NextFire: next.UTC()},
		}
		if got.Queue != "work" || len(got.Series) != len(want) {
			t.Fatalf("cron ls work -json = %+v, want queue work and %+v", got, want)
		}
		for k := range want {
			g, w := got.Series[k], want[k]
			if g.Name != w.Name || g.Recorded != w.Recorded || !g.NextFire.Equal(w.NextFire) || !g.LastFire.Equal(w.LastFire) {
				t.Errorf("series %d = %+v, want %+v", k, g, w)
			}
		}

		r := e.ok("cron", "ls", "work")
		var rows []string
		for line := range strings.Lines(r.out) {
			if f := strings.Fields(line); len(f) > 0 && f[0] != "SERIES" {
				rows = append(rows, f[0])
			}
		}
		if strings.Join(rows, " ") != "alpha mid zeta" {
			t.Errorf("cron ls work rows %q, want alpha, mid, zeta:\n%s", rows, r.out)
		}
		if f := fields(r.out, "alpha"); !strings.Contains(strings.Join(f, " "), "ago) not stored yet") {
			t.Errorf("alpha row = %q:\n%s", f, r.out)
		}
		if f := fields(r.out, "zeta"); len(f) < 2 || f[1] != "-" || !strings.Contains(strings.Join(f, " "), "(in ") {
			t.Errorf("zeta row = %q:\n%s", f, r.out)
		}

		// Names still choose the series, in their order.
		e.json(&got, "cron", "ls", "work", "zeta", "never")
		if len(got.Series) != 2 || got.Series[0].Name != "zeta" || !got.Series[0].NextFire.Equal(next) ||
			got.Series[1].Name != "never" || got.Series[1].Recorded {
			t.Errorf("cron ls work zeta never -json = %+v", got)
		}

		e.json(&got, "cron", "ls", "quiet")
		if got.Queue != "quiet" || got.Series == nil || len(got.Series) != 0 {
			t.Errorf("cron ls quiet -json = %+v, want an empty list of series", got)
		}
		if r := e.ok("cron", "ls", "quiet"); r.out != "" || !strings.Contains(r.errOut, `No cron series recorded in queue "quiet"`) {
			t.Errorf("cron ls quiet: stdout %q, stderr %q; want nothing and a line saying so", r.out, r.errOut)
		}
	})
}
