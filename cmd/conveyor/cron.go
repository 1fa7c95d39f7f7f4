package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
)

var cronSpec = spec{
	name:     "cron",
	synopsis: "cron ls <queue> [<series>...] [flags]",
	args:     []string{"subcommand", "queue", "[series]..."},
	about: `Shows the cron series of a queue (a delay.CronEntry's Name): the fire
stored ahead and not yet due (the next fire), or else the last fire.
Without series names it shows every series the queue's index of series
holds, sorted by name: those that stored a fire within their record's
life, at most 1,000 (those whose records expire last); with names, those
series, in the order given, each whether Redis has a record of it or not.

Redis keeps, per series, only the time of the latest fire an instance
stored, for a week or three gaps between fires; the specs live in the
apps, so a series that never stored a fire is not listed, and a fire not
stored yet (instances store each one about a second ahead) cannot be
shown.

Cost: without names, one read of the index (ZRANGE), one pipeline of a
GET per series (one round trip), then one O(1) read per series (its fire
among the queue's timers); with names, two O(1) reads per series (the
series' record, then its fire).`,
}

// seriesOut is one cron series in the JSON output of cron ls.
type seriesOut struct {
	Name string `json:"name"`
	// Recorded: Redis holds the series' record of its latest stored fire.
	Recorded bool `json:"recorded"`
	// NextFire is the fire stored and pending; LastFire the latest fire
	// stored, once it is no longer pending (it ran, or is running).
	NextFire time.Time `json:"next_fire,omitzero"`
	LastFire time.Time `json:"last_fire,omitzero"`
}

func runCron(ctx context.Context, args []string, std stdio) error {
	inv, err := cronSpec.start(ctx, args, std, func(inv *invocation) error {
		if inv.args[0] != "ls" {
			return inv.usagef("unknown cron command %q: want ls", inv.args[0])
		}
		for _, n := range inv.args[2:] {
			if err := broker.ValidateQueue(n); err != nil || len(n) > delay.MaxCronNameLen {
				return inv.usagef("series %q: not a cron entry name (at most %d bytes, the rules of queue names)", n, delay.MaxCronNameLen)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer inv.close()
	queue, names, insp := inv.queue, inv.args[2:], inv.insp
	out := []seriesOut{}
	if len(names) == 0 {
		all, err := insp.CronSeries(ctx, queue)
		if err != nil {
			return err
		}
		out = make([]seriesOut, len(all))
		for k, s := range all {
			out[k] = seriesOut{Name: s.Name, Recorded: true, LastFire: s.LastFire}
		}
	} else {
		timers := inv.c.DriverFor(inv.probe).(broker.Timers)
		out = make([]seriesOut, len(names))
		for k, n := range names {
			out[k].Name = n
			at, ok, err := timers.LastFire(ctx, queue, n)
			if err != nil {
				return fmt.Errorf("series %q of queue %q: %w", n, queue, err)
			}
			out[k].Recorded, out[k].LastFire = ok, at
		}
	}
	// A recorded fire still among the timers is the next one.
	for k := range out {
		s := &out[k]
		if !s.Recorded {
			continue
		}
		at := s.LastFire.UTC()
		_, err := insp.Job(ctx, queue, delay.FireID(s.Name, at), conveyor.JobDelayed)
		switch {
		case err == nil:
			s.NextFire, s.LastFire = at, time.Time{}
		case errors.Is(err, conveyor.ErrJobNotFound):
			s.LastFire = at
		default:
			return err
		}
	}
	if inv.t.json {
		return writeJSON(std.out, struct {
			Queue  string      `json:"queue"`
			Series []seriesOut `json:"series"`
		}{queue, out})
	}
	if len(out) == 0 {
		fmt.Fprintf(std.err, "No cron series recorded in queue %q.\n", queue)
		return nil
	}
	now := time.Now()
	tw := newTable(std.out)
	fmt.Fprintln(tw, "SERIES\tLAST FIRE\tNEXT FIRE")
	for _, s := range out {
		name := cell(s.Name, delay.MaxCronNameLen)
		switch {
		case !s.Recorded:
			fmt.Fprintf(tw, "%s\t%s\t%s\n", name, "no record (never fired, or idle past its record's life)", "-")
		case s.NextFire.IsZero():
			fmt.Fprintf(tw, "%s\t%s\t%s\n", name, when(now, s.LastFire), "not stored yet")
		default:
			fmt.Fprintf(tw, "%s\t%s\t%s\n", name, "-", when(now, s.NextFire))
		}
	}
	return tw.Flush()
}
