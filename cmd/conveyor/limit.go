package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/conveyorq/conveyor/broker"
)

var limitSpec = spec{
	name:     "limit",
	synopsis: "limit <queue> [-kind <kind>] [-max <n>] [flags]",
	args:     []string{"queue"},
	writes:   true,
	creates:  true,
	about: `Shows or sets a queue's fleet-wide concurrency limits: how many of its jobs
(with -kind, of one kind) may run at once across every worker. Without -max
it lists the queue's limits with the jobs running under each and the jobs
waiting for a slot. With -max it sets one limit (from 1 to 1000000), or
removes it with -max 0, letting its waiting jobs in at once.

A job takes a slot when a worker fetches it and gives it back when it ends
(acked, retried, discarded, handed back) or when its worker died and its
lease ran out. A job fetched over a limit waits in the limit's line without
counting an attempt. Limits are kept in Redis and last until changed
(docs/concurrency.md).

Cost: one script call, O(classes) to list, O(jobs let in) to set.`,
}

func runLimit(ctx context.Context, args []string, std stdio) error {
	var kind string
	var max int
	s := limitSpec
	s.flags = func(fs *flag.FlagSet) {
		fs.StringVar(&kind, "kind", "", "the kind of job the limit applies to; none: the whole queue")
		fs.IntVar(&max, "max", 0, "set the limit to this many running jobs; 0 removes it")
	}
	inv, err := s.start(ctx, args, std, nil)
	if err != nil {
		return err
	}
	defer inv.close()
	set := false
	inv.fs.Visit(func(f *flag.Flag) { set = set || f.Name == "max" })
	queue, insp := inv.queue, inv.insp
	if set {
		if err := insp.SetLimit(ctx, queue, kind, max); err != nil {
			return err
		}
		what := "queue " + fmt.Sprintf("%q", queue)
		if kind != "" {
			what = fmt.Sprintf("kind %q of queue %q", cell(kind, 64), queue)
		}
		said := fmt.Sprintf("At most %d jobs of %s run at once.", max, what)
		if max == 0 {
			said = fmt.Sprintf("Removed the limit of %s.", what)
		}
		return inv.done(struct {
			Queue string `json:"queue"`
			Kind  string `json:"kind"`
			Max   int    `json:"max"`
		}{queue, kind, max}, "%s", said)
	}
	ls, err := insp.Limits(ctx, queue)
	if err != nil {
		return err
	}
	if inv.t.json {
		if ls == nil {
			ls = []broker.Limit{}
		}
		return writeJSON(std.out, struct {
			Queue  string         `json:"queue"`
			Limits []broker.Limit `json:"limits"`
		}{queue, ls})
	}
	if len(ls) == 0 {
		fmt.Fprintf(std.err, "Queue %q has no concurrency limit.\n", queue)
		return nil
	}
	tw := newTable(std.out)
	fmt.Fprintln(tw, "KIND\tMAX\tRUNNING\tWAITING")
	for _, l := range ls {
		k, m := cell(l.Kind, 64), fmt.Sprint(l.Max)
		if l.Kind == "" {
			k = "(queue)"
		}
		if l.Max == 0 {
			m = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", k, m, l.Running, l.Waiting)
	}
	return tw.Flush()
}
