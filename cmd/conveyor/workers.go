package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/conveyorq/conveyor"
)

var workersSpec = spec{
	name:     "workers",
	synopsis: "workers [-running] [flags]",
	about: `Lists the live worker pools under the key prefix, sorted by ID: host, PID,
queues, concurrency, how many jobs they run, when they started and last
reported. Every pool renews its entry every 15 seconds by default (its
RegistryInterval), so the running jobs are as of its last report; the entry
of a process that died goes within three intervals. -running lists each
pool's running jobs too; -json always has them.

Cost: one SSCAN and one MGET per 500 pools: it grows with the fleet, not
with the jobs.`,
}

func runWorkers(ctx context.Context, args []string, std stdio) error {
	var running bool
	s := workersSpec
	s.flags = func(fs *flag.FlagSet) { fs.BoolVar(&running, "running", false, "list each pool's running jobs") }
	inv, err := s.start(ctx, args, std, nil)
	if err != nil {
		return err
	}
	defer inv.close()
	ws, err := inv.c.Shared().Workers(ctx) // the registry both drivers share
	if err != nil {
		return err
	}
	if inv.t.json {
		if ws == nil {
			ws = []*conveyor.WorkerInfo{}
		}
		return writeJSON(std.out, struct {
			Workers []*conveyor.WorkerInfo `json:"workers"`
		}{ws})
	}
	if len(ws) == 0 {
		fmt.Fprintf(std.err, "No live worker pools under prefix %q.\n", inv.t.prefix)
		return nil
	}
	now := time.Now()
	tw := newTable(std.out)
	fmt.Fprintln(tw, "ID\tHOST\tPID\tQUEUES\tCONCURRENCY\tRUNNING\tSTARTED\tSEEN\tVERSION")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", cell(w.ID, 64), cell(w.Host, 40), w.PID, cell(strings.Join(w.Queues, ","), 60),
			w.Concurrency, w.RunningTotal, ago(now, w.StartedAt), ago(now, w.SeenAt), cell(w.Version, 30))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !running {
		return nil
	}
	for _, w := range ws {
		fmt.Fprintf(std.out, "\n%s runs %d jobs", cell(w.ID, 64), w.RunningTotal)
		if len(w.Running) < w.RunningTotal {
			fmt.Fprintf(std.out, " (the oldest %d shown)", len(w.Running))
		}
		fmt.Fprintln(std.out, ":")
		if len(w.Running) == 0 {
			continue
		}
		tw := newTable(std.out)
		fmt.Fprintln(tw, "  ID\tKIND\tQUEUE\tSTARTED")
		for _, j := range w.Running {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", cell(j.ID, 64), cell(j.Kind, 40), cell(j.Queue, 40), ago(now, j.StartedAt))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
