package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// endState is what Redis held when the harness stopped waiting.
type endState struct {
	left      int64    // ready + in flight + delayed + waiting in a group or for a limit's slot
	stored    string   // what they hold, when left > 0 (job IDs are looked up in it)
	discarded int64    // records in the discard list
	reasons   []string // a few discard reasons
	drain     time.Duration
	drained   bool // the queue emptied before the deadline
}

// rules are what a scenario allows.
type rules struct {
	// explains lists the causes of a duplicate run the scenario injects:
	// "kill" (the earlier run's worker was SIGKILLed before its ack),
	// "lease_lost" and "unsettled" (its settle did not land: Redis or the
	// network was down or stalled). "retried" (a planned handler failure) is
	// always allowed.
	explains map[string]bool
	// lateBound, when positive, fails a delayed job that first ran more
	// than this after it was due.
	lateBound time.Duration
}

// verdict is the outcome of one scenario run on one driver.
type verdict struct {
	scenario, driver string
	run, runs        int

	enqueued, processed, lost int
	waiting                   int // jobs neither run to their end nor lost: still in Redis at the end
	dupSingle                 int // calls that stored more than one copy (counted by job)
	dupRuns                   int // handler runs beyond the first of each job
	explained                 map[string]int
	unexplained               int
	refusedButRan             int // calls refused with an error whose job ran
	unknownRan                int // calls failed with an unknown outcome whose job ran
	misreported               int // settles reported as lease lost that landed
	early                     int // delayed jobs run before they were due
	lateMax                   time.Duration
	workerExits               int // worker processes that exited on their own
	enqErrors                 int
	grouped                   int // jobs enqueued in a FIFO group that ran
	groupOverlaps             int // pairs of runs of two jobs of one group that ran at once
	groupOutOfOrder           int // pairs of jobs of one group that started against enqueue order
	limit, runningMax         int // the queue's concurrency limit (0: none); the most runs at once
	expectDiscards            int
	recovery                  time.Duration // -1: no fault to recover from
	took                      time.Duration // the whole run
	end                       endState

	facts    []string // what the scenario did: kills=5, restarts=2, ...
	problems []string // scenario-specific failures
	notes    []string // details printed under a failing verdict
	rules    rules
}

// judge reads the recorder after a run.
func judge(r *recorder, ru rules, end endState) *verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := &verdict{explained: map[string]int{}, end: end, rules: ru, recovery: -1}

	bySeq := map[int][]*runRec{}
	for _, run := range r.order {
		bySeq[run.seq] = append(bySeq[run.seq], run)
	}
	for _, runs := range bySeq {
		sort.SliceStable(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	}
	category := func(run *runRec) string {
		inc := r.incs[run.inc]
		switch run.outcome {
		case "":
			switch {
			case inc != nil && !inc.killed.IsZero():
				return "kill"
			case inc != nil && inc.exited && !inc.stopped:
				return "crash"
			}
			return "unfinished"
		case "retried", "postponed":
			if run.att < r.plans[run.seq].fail {
				return "retried"
			}
			return "retried_unplanned"
		}
		return run.outcome
	}
	note := func(format string, args ...any) {
		if len(v.notes) < 12 {
			v.notes = append(v.notes, fmt.Sprintf(format, args...))
		}
	}

	for _, c := range r.calls {
		if c.err != nil {
			v.enqErrors++
		}
		for i, seq := range c.seqs {
			runs := bySeq[seq]
			p := r.plans[seq]
			if c.err != nil {
				if len(runs) > 0 {
					if refusal(c.err) {
						v.refusedButRan++
						note("seq %d: Enqueue returned %q, yet job %s ran", seq, c.err, runs[0].id)
					} else {
						v.unknownRan++
					}
				}
			} else {
				v.enqueued++
				if p.discard {
					v.expectDiscards++
				}
				ended := false
				for _, run := range runs {
					if run.done || (p.discard && run.outcome == "discarded") {
						ended = true
					}
				}
				switch {
				case ended:
					v.processed++
				case end.stored != "" && strings.Contains(end.stored, c.ids[i]):
					v.waiting++
					note("seq %d (job %s): still in Redis after %d runs", seq, c.ids[i], len(runs))
				default:
					v.lost++
					note("seq %d (job %s): Enqueue returned nil, %d runs, none ran to its end, not in Redis", seq, c.ids[i], len(runs))
				}
			}

			// One call, one job: every run carries the ID the call returned,
			// and only one run is a first delivery (no recovery, no
			// attempt) unless the job was handed back unchanged.
			single := false
			for _, run := range runs {
				if c.err == nil && run.id != c.ids[i] {
					single = true
					note("seq %d: Enqueue returned job %s, yet job %s ran too", seq, c.ids[i], run.id)
					break
				}
			}
			first, released := 0, 0
			for _, run := range runs {
				if run.rec == 0 && run.att == 0 {
					first++
				}
				if run.outcome == "released" {
					released++
				}
			}
			if first > 1+released {
				single = true
				note("seq %d (job %s): %d first deliveries (no recovery, no attempt), %d hand-backs", seq, runs[0].id, first, released)
			}

			// Every run after the first needs an earlier run that did not
			// end in an ack, for a cause the scenario injects. A run after
			// acked runs only ran from a second stored copy.
			var causes []string
			for j, run := range runs {
				if j > 0 {
					v.dupRuns++
					switch {
					case len(causes) == 0:
						v.unexplained++
						single = true
						note("seq %d (job %s): run %d of %d follows only acked runs (a second copy)", seq, run.id, j+1, len(runs))
					case causes[0] == "retried" || ru.explains[causes[0]]:
						v.explained[causes[0]]++
						causes = causes[1:]
					default:
						v.unexplained++
						note("seq %d (job %s): run %d of %d follows a run ended by %q, which this scenario does not inject", seq, run.id, j+1, len(runs), causes[0])
						causes = causes[1:]
					}
				}
				if cat := category(run); cat != "acked" && !(cat == "discarded" && p.discard) {
					causes = append(causes, cat)
				}
			}

			if single {
				v.dupSingle++
			}

			// A settle reported as lease lost must have been taken over.
			for j, run := range runs {
				if run.outcome == "lease_lost" && j == len(runs)-1 {
					v.misreported++
					note("seq %d (job %s): its last run was reported lease_lost, yet it never ran again", seq, run.id)
				}
			}

			if c.err == nil && c.delay > 0 && len(runs) > 0 {
				due := c.start.Add(c.delay)
				if first := time.Unix(0, runs[0].startNs); first.Before(due.Add(-time.Millisecond)) {
					v.early++
					note("seq %d (job %s): Delay %v, ran %v early", seq, runs[0].id, c.delay, due.Sub(first).Round(time.Millisecond))
				} else if late := first.Sub(c.end.Add(c.delay)); late > v.lateMax {
					v.lateMax = late
				}
			}
		}
	}
	for n, inc := range r.incs {
		if inc.exited && !inc.stopped && inc.killed.IsZero() {
			v.workerExits++
			note("worker incarnation %d exited on its own (%v): %s", n, inc.exitErr, strings.Join(inc.lastLogs, " | "))
		} else if inc.stopped && inc.exitErr != nil {
			v.workerExits++
			note("worker incarnation %d did not stop cleanly (%v): %s", n, inc.exitErr, strings.Join(inc.lastLogs, " | "))
		}
	}
	judgeGroups(r, bySeq, v, note)
	v.runningMax = mostAtOnce(r)
	v.recovery = recoveryTime(r, bySeq, category)
	return v
}

// judgeGroups checks the promise of FIFO groups (docs/ordering.md): the
// jobs of one group run one at a time, in enqueue order, and a job holds
// its group from its first run to the end of its last (a planned retry's
// backoff, a lease recovered after a kill). So the spans of two jobs of a
// group (first start to last end) must not interleave, and when one job's
// Enqueue returned nil before another's began (or both were in one call
// that returned nil, in that order), the first job's span comes first.
// Times are the workers' clocks (one machine's): a handler's start and
// return, or the SIGKILL of a run's worker; a run whose end is unknown
// (its worker exited on its own) counts by its start. r.mu is held.
func judgeGroups(r *recorder, bySeq map[int][]*runRec, v *verdict, note func(string, ...any)) {
	type job struct {
		seq        int
		call       *callRec
		idx        int   // place in its call
		start, end int64 // its span
	}
	byGroup := map[string][]*job{}
	for _, c := range r.calls {
		for i, seq := range c.seqs {
			g := r.plans[seq].group
			if g == "" || len(bySeq[seq]) == 0 {
				continue
			}
			j := &job{seq: seq, call: c, idx: i}
			for _, run := range bySeq[seq] {
				if j.start == 0 || run.startNs < j.start {
					j.start = run.startNs
				}
				j.end = max(j.end, runEnd(r, run), run.startNs)
			}
			byGroup[g] = append(byGroup[g], j)
			v.grouped++
		}
	}
	// before reports whether a was stored ahead of b for sure: a call that
	// returned an error may have stored its jobs later than it returned.
	before := func(a, b *job) bool {
		if a.call.err != nil {
			return false
		}
		if a.call == b.call {
			return a.idx < b.idx
		}
		return a.call.end.Before(b.call.start)
	}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	for g, jobs := range byGroup {
		for x, first := range jobs {
			for _, second := range jobs[x+1:] {
				a, b := first, second
				if b.start < a.start {
					a, b = b, a // a started first
				}
				switch {
				case b.start < a.end:
					v.groupOverlaps++
					note("group %s: seq %d held its group for %.1f ms, seq %d started %.1f ms into it", g, a.seq, ms(a.end-a.start), b.seq, ms(b.start-a.start))
				case before(b, a):
					v.groupOutOfOrder++
					note("group %s: seq %d was enqueued first, yet seq %d ran %.1f ms before it", g, b.seq, a.seq, ms(b.start-a.start))
				}
			}
		}
	}
}

// runEnd returns when run ended, by the workers' clocks (one machine's):
// its handler's return, or the SIGKILL of its worker; 0 when unknown (its
// worker exited on its own). r.mu is held.
func runEnd(r *recorder, run *runRec) int64 {
	if inc := r.incs[run.inc]; run.endNs == 0 && inc != nil && !inc.killed.IsZero() {
		return inc.killed.UnixNano()
	}
	return run.endNs
}

// mostAtOnce returns the most handler runs that ran at once, each from its
// start to its end (runEnd); a run whose end is unknown is left out. r.mu
// is held.
func mostAtOnce(r *recorder) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, run := range r.order {
		if end := runEnd(r, run); end != 0 {
			edges = append(edges, edge{run.startNs, 1}, edge{max(end, run.startNs), -1})
		}
	}
	// At one instant an end comes before a start: a slot given back is
	// taken again.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// recoveryTime is the longest time from the end of a fault until work went
// on: for a worker kill, until every job the killed worker was running had
// started again elsewhere; for other faults, until the next ack. r.mu is
// held.
func recoveryTime(r *recorder, bySeq map[int][]*runRec, category func(*runRec) string) time.Duration {
	longest := time.Duration(-1)
	nextAck := func(after time.Time) (time.Duration, bool) {
		var best time.Time
		for _, run := range r.order {
			if run.outcome == "acked" && run.finish.After(after) && (best.IsZero() || run.finish.Before(best)) {
				best = run.finish
			}
		}
		return best.Sub(after), !best.IsZero()
	}
	for _, f := range r.faults {
		d, ok := time.Duration(0), false
		if f.kind == "kill" {
			for _, run := range r.order {
				if run.inc != f.inc || category(run) != "kill" {
					continue
				}
				for _, again := range bySeq[run.seq] {
					if again.inc != f.inc && again.start.After(f.end) {
						if s := again.start.Sub(f.end); s > d {
							d = s
						}
						ok = true
						break
					}
				}
			}
		}
		if !ok {
			d, ok = nextAck(f.end)
		}
		if ok && d > longest {
			longest = d
		}
	}
	return longest
}

// pass reports whether the run kept every promise.
func (v *verdict) failures() []string {
	var f []string
	add := func(cond bool, what string) {
		if cond {
			f = append(f, what)
		}
	}
	add(v.lost > 0, "lost")
	add(v.dupSingle > 0, "dup_single_call")
	add(v.unexplained > 0, "unexplained duplicates")
	add(v.refusedButRan > 0, "refused_but_ran")
	add(v.misreported > 0, "settle_misreported")
	add(v.early > 0, "early")
	add(v.rules.lateBound > 0 && v.lateMax > v.rules.lateBound, "late")
	add(v.end.left > 0, "left")
	add(v.end.discarded != int64(v.expectDiscards), "discarded")
	add(!v.end.drained, "not drained")
	add(v.workerExits > 0, "worker_exits")
	add(v.groupOverlaps > 0, "group_overlap")
	add(v.groupOutOfOrder > 0, "group_order")
	add(v.limit > 0 && v.runningMax > v.limit, "over_limit")
	return append(f, v.problems...)
}

// line is the verdict line.
func (v *verdict) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos: %s %s", v.scenario, v.driver)
	if v.runs > 1 {
		fmt.Fprintf(&b, " (run %d/%d)", v.run, v.runs)
	}
	fmt.Fprintf(&b, ": enqueued=%d processed=%d lost=%d dup_single_call=%d dup_runs=%d", v.enqueued, v.processed, v.lost, v.dupSingle, v.dupRuns)
	if v.dupRuns > 0 {
		var ex []string
		for k, n := range v.explained {
			ex = append(ex, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(ex)
		if v.unexplained > 0 {
			ex = append(ex, fmt.Sprintf("UNEXPLAINED=%d", v.unexplained))
		}
		fmt.Fprintf(&b, " (explained: %s)", strings.Join(ex, " "))
	}
	if v.recovery >= 0 {
		fmt.Fprintf(&b, " recovery=%s", fmtDur(v.recovery))
	} else {
		b.WriteString(" recovery=-")
	}
	fmt.Fprintf(&b, " drain=%s", fmtDur(v.end.drain))
	opt := func(name string, n int64) {
		if n != 0 {
			fmt.Fprintf(&b, " %s=%d", name, n)
		}
	}
	opt("refused_but_ran", int64(v.refusedButRan))
	opt("settle_misreported", int64(v.misreported))
	opt("early", int64(v.early))
	if v.lateMax > 0 && v.rules.lateBound > 0 {
		fmt.Fprintf(&b, " late_max=%s", fmtDur(v.lateMax))
	}
	opt("left", v.end.left)
	opt("waiting", int64(v.waiting))
	if v.end.discarded != 0 || v.expectDiscards != 0 {
		fmt.Fprintf(&b, " discarded=%d/%d", v.end.discarded, v.expectDiscards)
	}
	opt("worker_exits", int64(v.workerExits))
	opt("grouped", int64(v.grouped))
	opt("group_overlap", int64(v.groupOverlaps))
	opt("group_order", int64(v.groupOutOfOrder))
	if v.limit > 0 {
		fmt.Fprintf(&b, " running_max=%d/%d", v.runningMax, v.limit)
	}
	opt("enq_errors", int64(v.enqErrors))
	opt("unknown_outcome_ran", int64(v.unknownRan))
	for _, f := range v.facts {
		b.WriteString(" " + f)
	}
	if v.took > 0 {
		fmt.Fprintf(&b, " took=%s", fmtDur(v.took))
	}
	if fs := v.failures(); len(fs) > 0 {
		fmt.Fprintf(&b, " FAIL (%s)", strings.Join(fs, ", "))
	} else {
		b.WriteString(" PASS")
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
