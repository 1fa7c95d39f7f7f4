package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// step is how many jobs one re-drive or purge call handles: the size of
// the Inspector's own steps, so each call is one to a few bounded script
// calls and the progress moves at least once a round trip or so.
const step = 1000

// stepped runs do in steps of at most step jobs until want jobs are done
// or a step does fewer than it asked (nothing more matches), showing the
// progress on std.err when it takes more than one step. It returns how
// many jobs it did, also on an error.
func stepped(ctx context.Context, std stdio, verb string, want int, do func(ctx context.Context, max int) (int, error)) (int, error) {
	var p *progress
	if want > step {
		p = newProgress(std.err, verb, want)
	}
	done := 0
	for done < want {
		ask := min(step, want-done)
		n, err := do(ctx, ask)
		done += n
		if err != nil {
			if p != nil {
				p.end(done)
			}
			return done, fmt.Errorf("stopped after %d jobs %s: %w", done, verb, err)
		}
		if p != nil {
			p.show(done)
		}
		if n < ask {
			break
		}
	}
	if p != nil {
		p.end(done)
	}
	return done, nil
}

// repairFlags are the flags of the commands that change or delete jobs.
type repairFlags struct {
	max int
	yes bool
}

func (f *repairFlags) add(fs *flag.FlagSet, withMax bool) {
	if withMax {
		fs.IntVar(&f.max, "max", 0, "stop after this many jobs (0: all the queue held when the command began)")
	}
	fs.BoolVar(&f.yes, "yes", false, "do it without asking (needed when stdin is not a terminal)")
}

// check refuses a negative -max.
func (f *repairFlags) check(inv *invocation) error {
	if f.max < 0 {
		return inv.usagef("-max %d: want 0 (all) or more", f.max)
	}
	return nil
}

// repair does a re-drive or a purge of the command's queue: it reads how
// many jobs the state holds (count picks it from the queue's figures),
// asks to confirm (question gets which of them, "the 5" or "up to 2 of
// the 5"), then runs do in steps, up to that many or -max. It returns how
// many jobs do handled.
func (inv *invocation) repair(ctx context.Context, f repairFlags, count func(*conveyor.QueueSizes) int64, verb string,
	question func(which string) string, do func(ctx context.Context, max int) (int, error)) (int, error) {
	sizes, err := inv.insp.Queue(ctx, inv.queue)
	if err != nil {
		return 0, err
	}
	total := count(sizes)
	want, which := int(total), fmt.Sprintf("the %d", total)
	if f.max > 0 && int64(f.max) < total {
		want, which = f.max, fmt.Sprintf("up to %d of the %d", f.max, total)
	}
	if want == 0 {
		return 0, nil
	}
	if err := inv.confirm(f.yes, question(which)); err != nil {
		return 0, err
	}
	return stepped(ctx, inv.std, verb, want, do)
}

var redriveSpec = spec{
	name:     "redrive",
	synopsis: "redrive <queue> [-id id] [-kind kind] [-max n] [-yes] [flags]",
	args:     []string{"queue"},
	writes:   true,
	about: `Sends a queue's discarded jobs back to it, to run again at once with their
attempts reset, oldest discard first; -id and -kind narrow the selection.
It asks for confirmation on a terminal; without one it needs -yes. It works
in steps of 1,000 jobs, with a progress bar on a terminal and a progress
line a second otherwise, and stops after the number of records the queue
held when it began, or -max.

Cost: one script call per 1,000 discard records walked: O(records).`,
}

func runRedrive(ctx context.Context, args []string, std stdio) error {
	var (
		f      repairFlags
		filter broker.DiscardFilter
	)
	s := redriveSpec
	s.flags = func(fs *flag.FlagSet) {
		f.add(fs, true)
		fs.StringVar(&filter.ID, "id", "", "re-drive the records of this job ID only")
		fs.StringVar(&filter.Kind, "kind", "", "re-drive the records of jobs of this kind only")
	}
	inv, err := s.start(ctx, args, std, f.check)
	if err != nil {
		return err
	}
	defer inv.close()
	queue, insp := inv.queue, inv.insp
	selection := ""
	if filter.ID != "" {
		selection += fmt.Sprintf(" with ID %q", filter.ID)
	}
	if filter.Kind != "" {
		selection += fmt.Sprintf(" of kind %q", filter.Kind)
	}
	if selection != "" {
		selection = ", those" + selection + ","
	}
	n, err := inv.repair(ctx, f, func(s *conveyor.QueueSizes) int64 { return s.Discarded }, "re-driven", func(which string) string {
		return fmt.Sprintf("Re-drive %s discarded jobs of queue %q%s to run again?", which, queue, selection)
	}, func(ctx context.Context, max int) (int, error) {
		return insp.Redrive(ctx, queue, filter, max)
	})
	if err != nil {
		return err
	}
	return inv.done(struct {
		Queue    string `json:"queue"`
		Redriven int    `json:"redriven"`
	}{queue, n}, "Re-drove %d jobs of queue %q.", n, queue)
}

var purgeSpec = spec{
	name:     "purge",
	synopsis: "purge <queue> -state ready|delayed|discarded [-max n] [-yes] [flags]",
	args:     []string{"queue"},
	about: `Deletes a queue's jobs in one state: ready jobs next to run first, delayed
jobs earliest due first, discarded jobs oldest first. In-flight jobs cannot
be purged: workers hold them under leases; wait for them to settle, or for
their leases to run out and purge them as ready jobs. It asks for
confirmation on a terminal; without one it needs -yes. It works in steps of
1,000 jobs, with a progress bar on a terminal and a progress line a second
otherwise, and stops after the number of jobs the state held when it
began, or -max.

Cost: one script call per 1,000 jobs deleted.`,
}

func runPurge(ctx context.Context, args []string, std stdio) error {
	var (
		f         repairFlags
		stateFlag string
		state     conveyor.JobState
	)
	s := purgeSpec
	s.flags = func(fs *flag.FlagSet) {
		f.add(fs, true)
		fs.StringVar(&stateFlag, "state", "", "the state to purge: ready, delayed or discarded (required)")
	}
	inv, err := s.start(ctx, args, std, func(inv *invocation) (err error) {
		if state, err = inv.state(stateFlag, true); err != nil {
			return err
		}
		if state == conveyor.JobInFlight {
			return inv.usagef("-state in-flight: in-flight jobs cannot be purged, workers hold them under leases; " +
				"wait for them to settle, or for their leases to run out and purge them as ready jobs")
		}
		return f.check(inv)
	})
	if err != nil {
		return err
	}
	defer inv.close()
	queue, insp := inv.queue, inv.insp
	count := func(s *conveyor.QueueSizes) int64 {
		return map[conveyor.JobState]int64{conveyor.JobReady: s.Ready, conveyor.JobDelayed: s.Delayed, conveyor.JobDiscarded: s.Discarded}[state]
	}
	n, err := inv.repair(ctx, f, count, "purged", func(which string) string {
		return fmt.Sprintf("Delete %s %s jobs of queue %q? They cannot be brought back.", which, stateName(state), queue)
	}, func(ctx context.Context, max int) (int, error) {
		return insp.Purge(ctx, queue, state, max)
	})
	if err != nil {
		return err
	}
	return inv.done(struct {
		Queue  string `json:"queue"`
		State  string `json:"state"`
		Purged int    `json:"purged"`
	}{queue, stateName(state), n}, "Purged %d %s jobs of queue %q.", n, stateName(state), queue)
}

var cancelSpec = spec{
	name:     "cancel",
	synopsis: "cancel <queue> <id> [-job] [-yes] [flags]",
	args:     []string{"queue", "id"},
	about: `Cancels a pending timer by ID: a delayed job (its ID, the business key such
as order:123:timeout) or a retry waiting for its time (a retry whose ID a
caller's timer took waits as <id>#r<n>). Of a cancel and the timer's firing
exactly one wins; it fails when the timer is no longer pending.

With -job it cancels the job wherever it is (Client.CancelJob): a delayed
or ready job is removed; a running job's handler has its context cancelled
(cause conveyor.ErrJobCanceled) by the pool that runs it, and the job is
not retried. It fails when no job has the ID (finished, discarded, or never
was). It asks for confirmation on a terminal; without one it needs -yes.

Cost: two O(log n) calls (the timer's lookup, then the cancel); with -job,
a walk of the queue's in-flight and ready jobs, 500 per call (docs/cancel.md).`,
}

func runCancel(ctx context.Context, args []string, std stdio) error {
	var f repairFlags
	var anyState bool
	s := cancelSpec
	s.flags = func(fs *flag.FlagSet) {
		f.add(fs, false)
		fs.BoolVar(&anyState, "job", false, "cancel the job in any state, running jobs too, not only a timer")
	}
	inv, err := s.start(ctx, args, std, nil)
	if err != nil {
		return err
	}
	defer inv.close()
	if anyState {
		return cancelJob(ctx, inv, f.yes)
	}
	queue, id, insp := inv.queue, inv.args[1], inv.insp
	j, err := insp.Job(ctx, queue, id, conveyor.JobDelayed)
	if errors.Is(err, conveyor.ErrJobNotFound) {
		return fmt.Errorf("timer %q %w in queue %q: it has fired, was cancelled, or never was", id, errNotFound, queue)
	}
	if err != nil {
		return err
	}
	q := fmt.Sprintf("Cancel the timer %q (kind %s, due %s) of queue %q?", id, cell(j.Kind, 64), ago(time.Now(), j.RunAt), queue)
	if err := inv.confirm(f.yes, q); err != nil {
		return err
	}
	pending, err := insp.Cancel(ctx, queue, id)
	if err != nil {
		return err
	}
	if !pending {
		return fmt.Errorf("timer %q of queue %q fired or was cancelled before this cancel", id, queue)
	}
	return inv.done(struct {
		Queue     string `json:"queue"`
		ID        string `json:"id"`
		Cancelled bool   `json:"cancelled"`
	}{queue, id, true}, "Cancelled timer %q of queue %q.", id, queue)
}

// cancelJob is cancel -job: the job id in any state but discarded.
func cancelJob(ctx context.Context, inv *invocation, yes bool) error {
	queue, id, insp := inv.queue, inv.args[1], inv.insp
	j, err := insp.Job(ctx, queue, id, conveyor.JobDelayed, conveyor.JobInFlight, conveyor.JobReady)
	if errors.Is(err, conveyor.ErrJobNotFound) {
		return fmt.Errorf("job %q %w in queue %q: it finished, was discarded, or never was", id, errNotFound, queue)
	}
	if err != nil {
		return err
	}
	q := fmt.Sprintf("Cancel the %s job %q (kind %s) of queue %q?", stateName(j.State), id, cell(j.Kind, 64), queue)
	if err := inv.confirm(yes, q); err != nil {
		return err
	}
	st, err := insp.CancelJob(ctx, queue, id)
	if err != nil {
		return err
	}
	if st == 0 {
		return fmt.Errorf("job %q of queue %q finished or was cancelled before this cancel", id, queue)
	}
	return inv.done(struct {
		Queue     string `json:"queue"`
		ID        string `json:"id"`
		State     string `json:"state"`
		Cancelled bool   `json:"cancelled"`
	}{queue, id, stateName(st), true}, "Cancelled the %s job %q of queue %q.", stateName(st), id, queue)
}
