package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

var jobsSpec = spec{
	name:     "jobs",
	synopsis: "jobs <queue> -state ready|in-flight|delayed|discarded|finished [-offset n] [-limit n] [flags]",
	args:     []string{"queue"},
	about: `Lists a page of a queue's jobs in one state, in that state's order: ready
jobs next to run first, in-flight jobs earliest lease deadline first (list
driver) or oldest delivery first (stream driver), delayed jobs earliest due
first, discarded jobs newest first, finished jobs (their records, kept
where a pool or the job asked for them: docs/results.md) latest to expire
first. The line after the table says how to get the next page.

Cost: one script call for a page, O(offset + limit): deep pages cost more.
A stream queue's ready and in-flight pages skip 10,000 entries per call.`,
}

// jobsFlags are the flags of jobs.
type jobsFlags struct {
	state         string
	offset, limit int
}

func (f *jobsFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.state, "state", "", "the state to list: "+stateNames+" (required)")
	fs.IntVar(&f.offset, "offset", 0, "position of the page's first job in the state's order")
	fs.IntVar(&f.limit, "limit", 100, fmt.Sprintf("jobs per page, 1 to %d", broker.MaxInspectPage))
}

// pageOut is the JSON output of jobs.
type pageOut struct {
	Queue  string `json:"queue"`
	State  string `json:"state"`
	Total  int64  `json:"total"`
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
	// NextOffset is the offset of the next page; absent on the last one.
	NextOffset *int     `json:"next_offset,omitempty"`
	Jobs       []jobOut `json:"jobs"`
}

func runJobs(ctx context.Context, args []string, std stdio) error {
	var f jobsFlags
	s := jobsSpec
	s.flags = f.add
	var state conveyor.JobState
	inv, err := s.start(ctx, args, std, func(inv *invocation) (err error) {
		if state, err = inv.state(f.state, true); err != nil {
			return err
		}
		if f.offset < 0 {
			return inv.usagef("-offset %d: want 0 or more", f.offset)
		}
		if f.limit < 1 || f.limit > broker.MaxInspectPage {
			return inv.usagef("-limit %d: want 1 to %d", f.limit, broker.MaxInspectPage)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer inv.close()
	queue, insp := inv.queue, inv.insp
	page, err := insp.Jobs(ctx, queue, state, &conveyor.ListOptions{Offset: f.offset, Limit: f.limit})
	if err != nil {
		return err
	}
	next, more := page.Next()
	if inv.t.json {
		o := pageOut{Queue: queue, State: stateName(state), Total: page.Total, Offset: page.Offset, Limit: page.Limit, Jobs: []jobOut{}}
		if more {
			o.NextOffset = &next
		}
		for _, j := range page.Jobs {
			o.Jobs = append(o.Jobs, newJobOut(j))
		}
		return writeJSON(std.out, o)
	}
	if len(page.Jobs) == 0 {
		fmt.Fprintf(std.err, "No %s jobs in queue %q at offset %d (the state holds %d).\n", stateName(state), queue, f.offset, page.Total)
		return nil
	}
	now := time.Now()
	tw := newTable(std.out)
	header := map[conveyor.JobState]string{
		conveyor.JobReady:     "READY SINCE",
		conveyor.JobInFlight:  "LEASE",
		conveyor.JobDelayed:   "DUE",
		conveyor.JobDiscarded: "DISCARDED\tREASON",
		conveyor.JobFinished:  "FINISHED\tOUTCOME\tERROR",
	}[state]
	fmt.Fprintf(tw, "ID\tKIND\tATTEMPT\t%s\n", header)
	for _, j := range page.Jobs {
		var v string
		switch state {
		case conveyor.JobReady:
			v = ago(now, conveyor.ReadyAt(&j.Message))
		case conveyor.JobInFlight:
			v = lease(now, j)
		case conveyor.JobDelayed:
			v = ago(now, j.RunAt)
		case conveyor.JobDiscarded:
			v = ago(now, j.DiscardedAt) + "\t" + cell(j.Reason, 60)
		case conveyor.JobFinished:
			if r := j.Record; r != nil {
				v = ago(now, r.FinishedAt) + "\t" + r.Outcome + "\t" + cell(r.Error, 60)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", cell(j.ID, 64), cell(j.Kind, 40), j.Attempt(), v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	first := page.Offset + 1
	fmt.Fprintf(std.err, "Jobs %d to %d of %d %s.", first, page.Offset+len(page.Jobs), page.Total, stateName(state))
	if more {
		fmt.Fprintf(std.err, " Next page: conveyor jobs %s -state %s -offset %d -limit %d%s", queue, stateName(state), next, page.Limit, inv.t.echo())
	}
	fmt.Fprintln(std.err)
	return nil
}

var jobSpec = spec{
	name:     "job",
	synopsis: "job <queue> <id> [-state s] [flags]",
	args:     []string{"queue", "id"},
	about: `Shows one job by ID: its state, kind, attempts, times, headers and payload
(JSON indented, control characters escaped, the first 4 KiB; -json prints
all of it); a finished job's record (outcome, times, worker, error and
result). It fails when no state holds the job.

Cost: it searches the states where a job is now, cheapest first, then the
records, and stops at the first hit: delayed (O(1)), in flight, discarded
(at most the discard cap), ready (the whole backlog, 1,000 jobs per script
call), finished (O(1)). -state searches one state only: -state finished
finds a record without walking the backlog.`,
}

func runJob(ctx context.Context, args []string, std stdio) error {
	var stateFlag string
	s := jobSpec
	s.flags = func(fs *flag.FlagSet) {
		fs.StringVar(&stateFlag, "state", "", "search this state only: "+stateNames)
	}
	var states []conveyor.JobState
	inv, err := s.start(ctx, args, std, func(inv *invocation) error {
		st, err := inv.state(stateFlag, false)
		if st != 0 {
			states = append(states, st)
		}
		return err
	})
	if err != nil {
		return err
	}
	defer inv.close()
	queue, id, insp := inv.queue, inv.args[1], inv.insp
	j, err := insp.Job(ctx, queue, id, states...)
	if errors.Is(err, conveyor.ErrJobNotFound) {
		return fmt.Errorf("job %q %w in queue %q (it may have finished without a record: see docs/results.md)", id, errNotFound, queue)
	}
	if err != nil {
		return err
	}
	if inv.t.json {
		return writeJSON(std.out, newJobOut(j))
	}
	now := time.Now()
	tw := newTable(std.out)
	row := func(name string, v any) { fmt.Fprintf(tw, "%s\t%v\n", name, v) }
	row("ID:", cell(j.ID, 200))
	row("Queue:", j.Queue)
	row("Kind:", cell(j.Kind, 200))
	row("State:", stateName(j.State))
	attempts := fmt.Sprint(j.Attempt())
	if j.MaxAttempts > 0 {
		attempts += fmt.Sprintf(" of %d", j.MaxAttempts)
	}
	row("Attempt:", attempts)
	row("Recoveries:", j.Recoveries)
	if j.Timeout > 0 {
		row("Timeout:", j.Timeout)
	}
	row("Enqueued:", when(now, j.EnqueuedAt))
	switch j.State {
	case conveyor.JobDelayed:
		row("Due:", when(now, j.RunAt))
	case conveyor.JobInFlight:
		row("Lease:", lease(now, j))
	case conveyor.JobDiscarded:
		row("Discarded:", when(now, j.DiscardedAt))
		row("Reason:", cell(j.Reason, 1000))
	}
	if r := j.Record; r != nil {
		row("Outcome:", r.Outcome)
		if !r.StartedAt.IsZero() {
			row("Started:", when(now, r.StartedAt))
		}
		row("Finished:", when(now, r.FinishedAt))
		row("Kept until:", when(now, r.ExpiresAt))
		if r.Worker != "" {
			row("Worker:", cell(r.Worker, 200))
		}
		if r.Error != "" {
			row("Error:", cell(r.Error, 1000))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r := j.Record; r != nil {
		fmt.Fprintf(std.out, "Result (%d bytes):\n", len(r.Result))
		showPayload(std.out, r.Result)
		return nil
	}
	if len(j.Headers) > 0 {
		fmt.Fprintln(std.out, "Headers:")
		names := make([]string, 0, len(j.Headers))
		for k := range j.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			fmt.Fprintf(std.out, "  %s: %s\n", cell(k, 200), cell(j.Headers[k], 500))
		}
	}
	if j.Raw != nil {
		fmt.Fprintf(std.out, "Stored form (%d bytes; it could not be decoded):\n", len(j.Raw))
		showPayload(std.out, j.Raw)
		return nil
	}
	fmt.Fprintf(std.out, "Payload (%d bytes):\n", len(j.Payload))
	showPayload(std.out, j.Payload)
	return nil
}
