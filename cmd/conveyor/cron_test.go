package main

import (
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
)

// TestCronLs shows a series with a fire stored ahead, one whose last fire
// ran, and one Redis has no record of.
func TestCronLs(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *cliEnv) {
		e.Enqueue("work", "mail", "r1", nil)
		timers := e.d.(broker.Timers)
		fire := func(series string, at time.Time) {
			t.Helper()
			m := &broker.Message{ID: delay.FireID(series, at), Kind: "report", Queue: "work", RunAt: at, EnqueuedAt: time.Now()}
			if ok, err := timers.EnqueueFire(e.ctx, series, m, time.Hour); err != nil || !ok {
				t.Fatalf("EnqueueFire(%s) = %v, %v", series, ok, err)
			}
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
		e.fails(2, "missing series", "cron", "ls", "work")
		e.fails(2, `unknown cron command "list"`, "cron", "list", "work", "a")
		e.fails(2, `series "a b"`, "cron", "ls", "work", "a b")
		e.fails(1, "not found", "cron", "ls", "nosuch", "a")
	})
}
