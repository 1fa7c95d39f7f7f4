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
	synopsis: "cron ls <queue> <series>... [flags]",
	args:     []string{"subcommand", "queue", "series..."},
	about: `Shows cron series of a queue by name (a delay.CronEntry's Name): the fire
stored ahead and not yet due (the next fire), or else the last fire. Redis
keeps, per series, only the time of the latest fire an instance stored,
for a week or three gaps between fires; specs live in the apps, so the
series must be named here, and a fire not stored yet (instances store
each one about a second ahead) cannot be shown.

Cost: two O(1) reads per series (the series' record, then its fire among
the queue's timers).`,
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
	timers := inv.c.Driver(inv.probe.Driver).(broker.Timers)
	out := make([]seriesOut, len(names))
	for k, n := range names {
		out[k].Name = n
		at, ok, err := timers.LastFire(ctx, queue, n)
		if err != nil {
			return fmt.Errorf("series %q of queue %q: %w", n, queue, err)
		}
		if !ok {
			continue
		}
		out[k].Recorded = true
		_, err = insp.Job(ctx, queue, delay.FireID(n, at), conveyor.JobDelayed)
		switch {
		case err == nil:
			out[k].NextFire = at.UTC()
		case errors.Is(err, conveyor.ErrJobNotFound):
			out[k].LastFire = at.UTC()
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
	now := time.Now()
	tw := newTable(std.out)
	fmt.Fprintln(tw, "SERIES\tLAST FIRE\tNEXT FIRE")
	for _, s := range out {
		switch {
		case !s.Recorded:
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, "no record (never fired, or idle past its record's life)", "-")
		case s.NextFire.IsZero():
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, when(now, s.LastFire), "not stored yet")
		default:
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, "-", when(now, s.NextFire))
		}
	}
	return tw.Flush()
}
