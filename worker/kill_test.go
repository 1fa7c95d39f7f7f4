package worker_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The kill test runs a backlog through four worker processes (this test
// binary re-executed) while one of them is SIGKILLed every killEvery and
// started again. Each handler writes a witness in Redis; at the end every
// job must be in it, every job run twice must have finished its first run
// in a process that was killed before it could ack, and nothing may be left
// in flight.
var (
	// killJobs and killMin: the default run's size keeps every kill and
	// check at half the jobs; CONVEYOR_FULL_SIZE=1 (make chaos) runs 20,000
	// jobs and 10 kills at least.
	killJobs = fullOrShort(20_000, 10_000)
	killMin  = fullOrShort(10, 5)
)

// fullOrShort returns full when CONVEYOR_FULL_SIZE is set (make chaos runs
// the tests that kill worker processes at the size their figures in the
// docs were measured at), short otherwise (make test).
func fullOrShort(full, short int) int {
	if os.Getenv("CONVEYOR_FULL_SIZE") != "" {
		return full
	}
	return short
}

const (
	killWorkers = 4
	// killConcurrency is per worker process. The jobs' handler time (5-50 ms
	// each, 27.5 ms on average) over killWorkers*killConcurrency slots is a
	// lower bound of the run time: 10,000 jobs on 20 slots need at least
	// about 13.7 s, long enough for killMin kills whatever the machine.
	killConcurrency = 5
	killEvery       = 2 * time.Second
	// killLease is the workers' visibility timeout, extended every
	// killHeartbeat. Not a multiple of killEvery on purpose: with a lease
	// equal to the kill period, the jobs a killed worker held come back just
	// as the next worker is killed, and within a few kills one has been in
	// flight in three killed workers and is discarded as poison (seen with
	// the list driver at 2 s). The leases of a worker killed at T run out
	// between T+2.5s and T+3s, between two kills.
	killLease     = 3 * time.Second
	killHeartbeat = 500 * time.Millisecond
	// killDeadline bounds the whole run of one driver.
	killDeadline = 5 * time.Minute
)

const (
	killChildEnv   = "CONVEYOR_KILL_CHILD"   // driver index, set in the child
	killPrefixEnv  = "CONVEYOR_KILL_PREFIX"  // the queue's key prefix
	killWitnessEnv = "CONVEYOR_KILL_WITNESS" // the witness keys' prefix
	killIncEnv     = "CONVEYOR_KILL_INC"     // incarnation number of the child
)

// killJobDuration is the handler time of a job: 5 to 50 ms, drawn from its
// ID so that every run of a job takes as long.
func killJobDuration(id string) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return time.Duration(5+h.Sum32()%46) * time.Millisecond
}

// killWitness names the witness keys the workers write, under a prefix of
// their own (so that the queue's prefix holds only queue keys).
type killWitness string

func (w killWitness) enqueued() string       { return string(w) + ":enqueued" }  // SET of job IDs enqueued
func (w killWitness) handled() string        { return string(w) + ":handled" }   // SET of job IDs whose handler finished
func (w killWitness) count() string          { return string(w) + ":count" }     // HASH job ID -> handler runs finished
func (w killWitness) recovered() string      { return string(w) + ":recovered" } // SET of IDs finished with Recoveries >= 1
func (w killWitness) attempted() string      { return string(w) + ":attempted" } // SET of IDs run with Retries != 0
func (w killWitness) started(inc int) string { return string(w) + ":started:" + strconv.Itoa(inc) }
func (w killWitness) done(inc int) string    { return string(w) + ":done:" + strconv.Itoa(inc) }

func TestKillWorkers(t *testing.T) { crashTest(t, killChildEnv, killChild, killRun) }

func killRun(t *testing.T, i int) {
	e := newEnv(t, i)
	w := killWitness(redistest.Prefix(t))
	ctx := context.Background()
	began := time.Now()

	var work time.Duration // handler time of all jobs together
	for b := 0; b < killJobs; b += 1000 {
		reqs := make([]conveyor.Request, min(1000, killJobs-b))
		for j := range reqs {
			reqs[j] = conveyor.Request{Kind: "work"}
		}
		ms, err := e.client.EnqueueMany(ctx, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]any, len(ms))
		for j, m := range ms {
			ids[j] = m.ID
			work += killJobDuration(m.ID)
		}
		if err := e.rdb.SAdd(ctx, w.enqueued(), ids...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.rdb.SCard(ctx, w.enqueued()).Result(); err != nil || n != int64(killJobs) {
		t.Fatalf("%d distinct job IDs enqueued (%v), want %d", n, err, killJobs)
	}
	floor := work / (killWorkers * killConcurrency)
	if floor < time.Duration(killMin+1)*killEvery {
		t.Fatalf("the jobs need only %v on %d slots: too short for %d kills %v apart; lower killConcurrency",
			floor, killWorkers*killConcurrency, killMin, killEvery)
	}

	inc := 0
	spawn := func() (*proctest.Child, int) {
		p := proctest.StartTest(t, "TestKillWorkers",
			killChildEnv+"="+strconv.Itoa(i), killPrefixEnv+"="+e.prefix,
			killWitnessEnv+"="+string(w), killIncEnv+"="+strconv.Itoa(inc))
		inc++
		return p, inc - 1
	}
	var (
		procs  [killWorkers]*proctest.Child
		incs   [killWorkers]int
		killed []int // incarnations killed
	)
	for s := range procs {
		procs[s], incs[s] = spawn()
	}
	t.Logf("%d jobs enqueued (%v of handler time, at least %v on %d slots), %d workers started in %v",
		killJobs, work.Round(time.Second), floor.Round(time.Second), killWorkers*killConcurrency, killWorkers, time.Since(began).Round(time.Millisecond))

	// The workload: kill one worker every killEvery (once the workers got
	// some work done since the last kill: killDue), round robin, and start
	// a new one in its place, until the witness holds every job.
	kill := time.NewTicker(killEvery)
	defer kill.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	deadline := time.NewTimer(killDeadline)
	defer deadline.Stop()
	handled := func() int64 {
		n, err := e.rdb.SCard(ctx, w.handled()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	runStart := time.Now()
	var atLastKill int64 // the witness's count at the last kill
run:
	for {
		select {
		case <-kill.C:
			h := handled()
			if h == int64(killJobs) {
				break run
			}
			if !killDue(h, atLastKill, int64(killJobs)) {
				continue
			}
			atLastKill = h
			s := len(killed) % killWorkers
			killWorker(t, procs[s])
			killed = append(killed, incs[s])
			procs[s], incs[s] = spawn()
		case <-poll.C:
			if handled() == int64(killJobs) {
				break run
			}
			// A job discarded would never reach the witness: fail now,
			// saying so (the workers run without the poison cap, see
			// uncappedDriver).
			if recs := deadRecords(t, e, "q"); len(recs) > 0 {
				t.Fatalf("after %d kills, %d jobs discarded, e.g. %q", len(killed), len(recs), recs[0].Reason)
			}
			for s, p := range procs {
				if p.Exited() {
					t.Fatalf("worker incarnation %d exited on its own: %v", incs[s], p.Err())
				}
			}
		case <-deadline.C:
			t.Fatalf("after %v and %d kills the witness holds %d of %d jobs", killDeadline, len(killed), handled(), killJobs)
		}
	}
	allHandled := time.Since(runStart)

	// Jobs a killed worker finished but did not ack run again once their
	// lease runs out: wait until nothing is left in flight.
	drv := durable[i].Name
	waitUntil(t, "nothing left in flight", 30*time.Second, func() (bool, string) {
		left := inFlight(t, e, drv, "q")
		return left == "", left
	})
	drained := time.Since(runStart)
	for s, p := range procs {
		if err := p.Stop(t, 30*time.Second); err != nil {
			t.Fatalf("worker incarnation %d did not stop cleanly: %v", incs[s], err)
		}
	}
	if left := inFlight(t, e, drv, "q"); left != "" {
		t.Fatalf("after the workers stopped: %s", left)
	}
	for _, r := range deadRecords(t, e, "q") {
		t.Errorf("discarded at %v: %s", r.At, r.Reason)
	}
	if len(killed) < killMin {
		t.Fatalf("only %d kills before the work ran out, want at least %d", len(killed), killMin)
	}

	// 0 jobs lost, and no job the test did not enqueue.
	if lost, err := e.rdb.SDiff(ctx, w.enqueued(), w.handled()).Result(); err != nil || len(lost) != 0 {
		t.Fatalf("%d jobs lost (%v), e.g. %q", len(lost), err, firstFew(lost, 5))
	}
	if extra, err := e.rdb.SDiff(ctx, w.handled(), w.enqueued()).Result(); err != nil || len(extra) != 0 {
		t.Fatalf("%d handled jobs were never enqueued (%v): %q", len(extra), err, firstFew(extra, 5))
	}
	// A crash is not a failed attempt.
	if att, err := e.rdb.SMembers(ctx, w.attempted()).Result(); err != nil || len(att) != 0 {
		t.Fatalf("%d jobs ran with Retries != 0 (%v), e.g. %q; no handler failed", len(att), err, firstFew(att, 5))
	}

	// Every job a killed worker started but did not finish came back as a
	// recovery.
	var inFlightAtKill int
	for _, k := range killed {
		cut, err := e.rdb.SDiff(ctx, w.started(k), w.done(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		inFlightAtKill += len(cut)
		if len(cut) == 0 {
			continue
		}
		rec, err := e.rdb.SMIsMember(ctx, w.recovered(), asArgs(cut)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for j, ok := range rec {
			if !ok {
				t.Errorf("job %s was running in killed incarnation %d but never ran with Recoveries >= 1", cut[j], k)
			}
		}
	}

	// Every duplicate is explained by a kill: a job whose handler finished c
	// times finished at least c-1 of them in a process killed before its
	// ack, and ran again as a recovery.
	counts, err := e.rdb.HGetAll(ctx, w.count()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != killJobs {
		t.Fatalf("run counts for %d jobs, want %d", len(counts), killJobs)
	}
	var dups, runs int
	for id, v := range counts {
		c, err := strconv.Atoi(v)
		if err != nil || c < 1 {
			t.Fatalf("job %s: run count %q", id, v)
		}
		runs += c
		if c == 1 {
			continue
		}
		dups++
		var inKilled int
		for _, k := range killed {
			ok, err := e.rdb.SIsMember(ctx, w.done(k), id).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				inKilled++
			}
		}
		rec, err := e.rdb.SIsMember(ctx, w.recovered(), id).Result()
		if err != nil {
			t.Fatal(err)
		}
		if inKilled < c-1 || !rec {
			t.Errorf("job %s ran to completion %d times, %d of them in killed workers (want >= %d), a run with Recoveries >= 1: %v",
				id, c, inKilled, c-1, rec)
		}
	}
	recovered, err := e.rdb.SCard(ctx, w.recovered()).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d kills; all %d jobs handled after %v, nothing in flight after %v; %d handler runs finished; "+
		"%d jobs ran twice or more, all after a kill; %d jobs were running in a killed worker; %d jobs finished as recoveries",
		drv, len(killed), killJobs, allHandled.Round(time.Millisecond), drained.Round(time.Millisecond), runs,
		dups, inFlightAtKill, recovered)
	assertNoKeys(t, e)
}

// killChild is a worker process of TestKillWorkers: it runs a pool whose
// handler takes killJobDuration and writes the witness, until its stdin
// closes (a clean stop) or it is killed.
func killChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	inc, _ := strconv.Atoi(os.Getenv(killIncEnv))
	w := killWitness(os.Getenv(killWitnessEnv))
	rdb := redistest.Client(t)
	d := uncappedDriver(t, i, rdb, os.Getenv(killPrefixEnv))
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		if err := rdb.SAdd(ctx, w.started(inc), job.ID).Err(); err != nil {
			return err
		}
		timer := time.NewTimer(killJobDuration(job.ID)) // the work
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		}
		// One transaction, so that a kill leaves all of it or none.
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, w.handled(), job.ID)
			p.HIncrBy(ctx, w.count(), job.ID, 1)
			p.SAdd(ctx, w.done(inc), job.ID)
			if job.Recoveries > 0 {
				p.SAdd(ctx, w.recovered(), job.ID)
			}
			if job.Retries != 0 {
				p.SAdd(ctx, w.attempted(), job.ID)
			}
			return nil
		})
		return err
	})
	runChild(t, d, h, &worker.Config{
		Queue: "q", Concurrency: killConcurrency, VisibilityTimeout: killLease, HeartbeatInterval: killHeartbeat,
		Logger: childLog(slog.LevelWarn),
	})
}

// inFlight describes what the queue still holds ready, in flight or delayed;
// "" when nothing.
func inFlight(t *testing.T, e env, drv, queue string) string {
	t.Helper()
	ctx := context.Background()
	k := keys.Queue(e.prefix, queue)
	var left []string
	note := func(what string, n int64, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n != 0 {
			left = append(left, fmt.Sprintf("%s %d", what, n))
		}
	}
	switch drv {
	case "list":
		n, err := e.rdb.LLen(ctx, k.Part("ready")).Result()
		note("ready LLEN", n, err)
		n, err = e.rdb.ZCard(ctx, k.Part("lease")).Result()
		note("lease ZCARD", n, err)
	case "stream":
		s := k.Part("stream")
		n, err := e.rdb.Exists(ctx, s).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			n, err = e.rdb.XLen(ctx, s).Result()
			note("stream XLEN", n, err)
			pend, err := e.rdb.XPending(ctx, s, "conveyor").Result()
			switch {
			case err == nil:
				note("XPENDING", pend.Count, nil)
			case strings.HasPrefix(err.Error(), "NOGROUP"):
				// Drained and deleted since EXISTS: nothing pending.
				if n, err := e.rdb.Exists(ctx, s).Result(); err != nil || n != 0 {
					t.Fatalf("XPENDING: NOGROUP, yet the stream exists (%d, %v)", n, err)
				}
			default:
				t.Fatalf("XPENDING: %v", err)
			}
		}
	default:
		t.Fatalf("unknown driver %s", drv)
	}
	n, err := e.rdb.ZCard(ctx, k.Part("delayed")).Result()
	note("delayed ZCARD", n, err)
	return strings.Join(left, ", ")
}

// waitUntil checks cond every 20 ms until it holds, failing t after timeout
// with cond's last description of what it waits for.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, state)
		}
	}
}

// crashTest runs a test whose workers are this test binary re-executed:
// in such a child (env names the driver's index) it runs child; in the test
// process it runs run once per durable driver, in parallel.
func crashTest(t *testing.T, env string, child func(*testing.T, string), run func(*testing.T, int)) {
	crashTestOf(t, env, child, run, true)
}

// crashTestApart is crashTest for a test too heavy to run beside the
// package's other tests: its drivers still run in parallel with each
// other.
func crashTestApart(t *testing.T, env string, child func(*testing.T, string), run func(*testing.T, int)) {
	crashTestOf(t, env, child, run, false)
}

func crashTestOf(t *testing.T, env string, child func(*testing.T, string), run func(*testing.T, int), parallel bool) {
	if idx := os.Getenv(env); idx != "" {
		child(t, idx)
		return
	}
	if parallel {
		t.Parallel()
	}
	for i, drv := range durable {
		t.Run(drv.Name, func(t *testing.T) {
			t.Parallel()
			run(t, i)
		})
	}
}

// killWorker SIGKILLs a worker process, waits until it is gone, and checks
// it died of the signal.
func killWorker(t *testing.T, c *proctest.Child) {
	t.Helper()
	c.Kill(t)
	if !c.Killed() {
		t.Fatalf("killed worker ended with %v, want SIGKILL", c.Err())
	}
}

func asArgs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func firstFew(ss []string, n int) []string { return ss[:min(n, len(ss))] }

// runChild runs a pool of d, h and cfg in a worker process of a test,
// until the test that started it closes its stdin.
func runChild(t *testing.T, d broker.Driver, h conveyor.Handler, cfg *worker.Config) {
	p, err := worker.NewPool(d, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := proctest.UntilStdinCloses()
	defer cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// childLog is the logger of a test's worker process: to stderr, which the
// test shows when the process fails, from level on.
func childLog(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
