package main

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/queueprobe"
)

var queuesSpec = spec{
	name:     "queues",
	synopsis: "queues [flags]",
	about: `Lists the queues under the key prefix, sorted by name, with their jobs per
state (ready, in flight, delayed, discarded), whether they are paused, the
driver their keys show, their processed and failed counts (since the queue
began), and how many jobs they processed and failed per minute over the
last 5 minutes. The rates come from the history that a worker pool serving
each queue records, one sample a minute by default
(worker.Config.HistoryEvery); a queue shows "-" until two are there.

A queue is listed once a process has enqueued to it or opened a consumer on
it; a drained queue stays listed. Cost: one read of the queue registry per
1,000 queues, then three pipelines: O(1) reads per queue (what the keys
say), one script per queue, and one XREVRANGE per queue reading the last 6
minutes of its history (about 6 entries at the default interval). No KEYS,
no SCAN.`,
}

// queueOut is one queue's figures in the JSON output of queues and stats.
type queueOut struct {
	Queue     string `json:"queue"`
	Driver    string `json:"driver"`
	Paused    bool   `json:"paused"`
	Ready     int64  `json:"ready"`
	InFlight  int64  `json:"in_flight"`
	Delayed   int64  `json:"delayed"`
	Discarded int64  `json:"discarded"`
	// Grouped counts the jobs waiting in their FIFO groups' lines.
	Grouped int64 `json:"grouped"`
	// Limited counts the jobs waiting for a concurrency limit's slot.
	Limited   int64 `json:"limited"`
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
	// Rate5m is the throughput over the last 5 minutes of the queue's
	// history; absent when there are fewer than two samples.
	Rate5m *rateOut `json:"rate_5m,omitempty"`
}

func newQueueOut(p queueprobe.Queue, s *conveyor.QueueSizes) queueOut {
	driver := p.Driver
	if driver == "" {
		driver = "unknown"
	}
	return queueOut{Queue: s.Queue, Driver: driver, Paused: p.Paused, Ready: s.Ready, InFlight: s.InFlight,
		Delayed: s.Delayed, Discarded: s.Discarded, Grouped: s.Grouped, Limited: s.Limited, Processed: s.Processed, Failed: s.Failed}
}

func runQueues(ctx context.Context, args []string, std stdio) error {
	inv, err := queuesSpec.start(ctx, args, std, nil)
	if err != nil {
		return err
	}
	defer inv.close()
	figs, err := inv.c.Overview(ctx)
	if err != nil {
		return inv.fail(err)
	}
	out := make([]queueOut, len(figs))
	for k, f := range figs {
		out[k] = newQueueOut(f.Queue, f.QueueSizes)
	}
	if len(out) > 0 {
		names := make([]string, len(out))
		for k, q := range out {
			names[k] = q.Queue
		}
		now := time.Now()
		hs, err := inv.c.Histories(ctx, now.Add(-shortWindow-sampleSlack), names...)
		if err != nil {
			// The figures stand without the rates: say why some are missing.
			fmt.Fprintf(std.err, "conveyor: rates left out: %v\n", err)
		}
		for k, samples := range hs {
			out[k].Rate5m = rateOver(samples, now, shortWindow)
		}
	}
	if inv.t.json {
		return writeJSON(std.out, struct {
			Queues []queueOut `json:"queues"`
		}{out})
	}
	if len(out) == 0 {
		fmt.Fprintf(std.err, "No queues under prefix %q.\n", inv.t.prefix)
		return nil
	}
	tw := newTable(std.out)
	fmt.Fprintln(tw, "QUEUE\tDRIVER\tREADY\tIN FLIGHT\tDELAYED\tDISCARDED\tPAUSED\tPROCESSED\tFAILED\tPROCESSED/MIN\tFAILED/MIN")
	for _, q := range out {
		processed, failed := q.Rate5m.cells()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t%s\n", q.Queue, q.Driver, q.Ready, q.InFlight, q.Delayed, q.Discarded, yesNo(q.Paused), q.Processed, q.Failed, processed, failed)
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

var statsSpec = spec{
	name:     "stats",
	synopsis: "stats <queue> [flags]",
	args:     []string{"queue"},
	about: `Shows one queue in depth: its jobs per state, processed and failed counts,
how many jobs it processed and failed per minute over the last 5 minutes
and over the last hour (each with the span of history it covers), whether
it is paused, its discard queue (records, oldest, how many retention
dropped), how long the next ready job has waited, when the next timer is
due, the oldest in-flight job's lease and the last discard's reason. The
rates come from the history that a worker pool serving the queue records,
one sample a minute by default (worker.Config.HistoryEvery); they show "-"
until two are there.

Cost: one pipeline of O(1) reads, one script reading every figure at once,
one XREVRANGE reading the last hour of the queue's history (about 60
entries at the default interval), then one short page of each state (one
job each; a stream queue's ready and in-flight pages are read from the
stream's start).`,
}

// statsOut is the JSON output of stats.
type statsOut struct {
	queueOut
	// Rate1h is the throughput over the last hour of the queue's history;
	// absent when there are fewer than two samples.
	Rate1h   *rateOut `json:"rate_1h,omitempty"`
	Discards struct {
		Count          int64     `json:"count"`
		Oldest         time.Time `json:"oldest,omitzero"`
		DroppedByCount int64     `json:"dropped_by_count"`
		DroppedByAge   int64     `json:"dropped_by_age"`
	} `json:"discards"`
	// The first job of each state, in the state's order; absent when the
	// state is empty.
	NextReady     *jobOut `json:"next_ready,omitempty"`
	OldestLeased  *jobOut `json:"oldest_in_flight,omitempty"`
	NextDelayed   *jobOut `json:"next_delayed,omitempty"`
	LastDiscarded *jobOut `json:"last_discarded,omitempty"`
}

func runStats(ctx context.Context, args []string, std stdio) error {
	inv, err := statsSpec.start(ctx, args, std, nil)
	if err != nil {
		return err
	}
	defer inv.close()
	queue, insp := inv.queue, inv.insp
	p := inv.probe
	s, err := insp.Queue(ctx, queue)
	if err != nil {
		return err
	}
	var o statsOut
	o.queueOut = newQueueOut(p, s)
	o.Discards.Count, o.Discards.Oldest = s.Discards.Count, s.Discards.Oldest.UTC()
	o.Discards.DroppedByCount, o.Discards.DroppedByAge = s.Discards.DroppedByCount, s.Discards.DroppedByAge
	now := time.Now()
	hs, err := inv.c.Histories(ctx, now.Add(-longWindow-sampleSlack), queue)
	if err != nil {
		fmt.Fprintf(std.err, "conveyor: rates left out: %v\n", err)
	}
	if hs != nil {
		o.Rate5m, o.Rate1h = rateOver(hs[0], now, shortWindow), rateOver(hs[0], now, longWindow)
	}
	first := map[conveyor.JobState]*conveyor.JobInfo{}
	for _, f := range []struct {
		state conveyor.JobState
		n     int64
		into  **jobOut
	}{
		{conveyor.JobReady, s.Ready, &o.NextReady},
		{conveyor.JobInFlight, s.InFlight, &o.OldestLeased},
		{conveyor.JobDelayed, s.Delayed, &o.NextDelayed},
		{conveyor.JobDiscarded, s.Discarded, &o.LastDiscarded},
	} {
		if f.n == 0 {
			continue
		}
		page, err := insp.Jobs(ctx, queue, f.state, &conveyor.ListOptions{Limit: 1})
		if err != nil {
			return err
		}
		if len(page.Jobs) > 0 {
			j := newJobOut(page.Jobs[0])
			*f.into, first[f.state] = &j, page.Jobs[0]
		}
	}
	if inv.t.json {
		return writeJSON(std.out, o)
	}
	tw := newTable(std.out)
	row := func(name string, v any) { fmt.Fprintf(tw, "%s\t%v\n", name, v) }
	row("Queue:", o.Queue)
	row("Driver:", o.Driver)
	row("Paused:", yesNo(o.Paused))
	row("Ready:", o.Ready)
	row("In flight:", o.InFlight)
	row("Delayed:", o.Delayed)
	row("Discarded:", o.Discarded)
	if o.Grouped > 0 {
		row("Waiting in groups:", o.Grouped)
	}
	if o.Limited > 0 {
		row("Waiting for a limit:", o.Limited)
	}
	row("Processed:", o.Processed)
	row("Failed:", o.Failed)
	row("Rate (5 min):", o.Rate5m.line(now))
	row("Rate (1 hour):", o.Rate1h.line(now))
	named := func(j *conveyor.JobInfo) string { return cell(j.ID, 64) + " (" + cell(j.Kind, 64) + ")" }
	if j := first[conveyor.JobReady]; j != nil {
		row("Next ready:", named(j)+", ready since "+ago(now, conveyor.ReadyAt(&j.Message)))
	}
	if j := first[conveyor.JobInFlight]; j != nil {
		row("Oldest in flight:", named(j)+", "+lease(now, j))
	}
	if j := first[conveyor.JobDelayed]; j != nil {
		row("Next timer:", named(j)+", due "+ago(now, j.RunAt))
	}
	if j := first[conveyor.JobDiscarded]; j != nil {
		row("Last discarded:", named(j)+", "+ago(now, j.DiscardedAt)+": "+cell(j.Reason, 100))
	}
	row("Discard records:", o.Discards.Count)
	row("  oldest:", when(now, o.Discards.Oldest))
	row("  dropped, over the cap:", o.Discards.DroppedByCount)
	row("  dropped, too old:", o.Discards.DroppedByAge)
	return tw.Flush()
}

// lease says where an in-flight job's lease stands, as the driver keeps
// it: a deadline (list) or a start and a holder (stream).
func lease(now time.Time, j *conveyor.JobInfo) string {
	if !j.LeaseDeadline.IsZero() {
		return "lease runs out " + ago(now, j.LeaseDeadline)
	}
	return fmt.Sprintf("leased %s by %s", ago(now, j.LeasedAt), cell(j.Consumer, 64))
}
