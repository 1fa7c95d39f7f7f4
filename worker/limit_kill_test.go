package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The limit kill test runs jobs of one kind with a fleet-wide concurrency
// limit through worker processes of a concurrency well above it. Each
// handler run adds itself, in one script with its start, to a witness set
// of running jobs and records the set's largest size; the limit holds if
// that never passes it. One process runs alone until it holds every slot
// and is SIGKILLed: its slots come back with its leases, so no job may
// start before the visibility timeout runs out, and jobs must start again
// soon after.
const (
	limitKillJobs        = 5000
	limitKillLimit       = 20
	limitKillWorkers     = 3
	limitKillConcurrency = 50
	limitKillLease       = 2 * time.Second
	limitKillHeartbeat   = 400 * time.Millisecond
	limitKillDeadline    = 2 * time.Minute
	// limitKillBack bounds the wait, past the visibility timeout, for the
	// dead holder's slots to come back: the lease's expiry is noticed at
	// the next look for expired leases, once a second, though a loaded
	// machine (a full make test, two cores) has taken over 4 s. The test
	// is that the slots come back with the lease, not how fast: the log
	// line gives the figure.
	limitKillBack = 10 * time.Second
	limitKillKind = "persist"
)

const (
	limitKillChildEnv   = "CONVEYOR_LIMIT_KILL_CHILD"
	limitKillPrefixEnv  = "CONVEYOR_LIMIT_KILL_PREFIX"
	limitKillWitnessEnv = "CONVEYOR_LIMIT_KILL_WITNESS"
	limitKillNameEnv    = "CONVEYOR_LIMIT_KILL_NAME"
)

// limitWitness names the witness keys under a prefix of their own.
type limitWitness string

func (w limitWitness) running() string { return string(w) + ":running" } // SET "<process>/<job>/<run>" running
func (w limitWitness) max() string     { return string(w) + ":max" }     // STRING the running set's largest size
func (w limitWitness) starts() string  { return string(w) + ":starts" }  // STRING runs started
func (w limitWitness) handled() string { return string(w) + ":handled" } // SET job IDs finished

// limitStart adds a run to the running set and keeps the largest size.
var limitStart = redis.NewScript(`
redis.call('SADD', KEYS[1], ARGV[1])
local n = redis.call('SCARD', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], n)
end
redis.call('INCR', KEYS[3])
return n
`)

// TestLimitUnderKills is not parallel with the package's other tests (its
// drivers run in parallel with each other), as TestGroupOrderUnderKills.
func TestLimitUnderKills(t *testing.T) {
	crashTestApart(t, limitKillChildEnv, limitKillChild, limitKillRun)
}

func limitKillRun(t *testing.T, i int) {
	e := newEnv(t, i)
	if !e.d.Capabilities().Limits {
		t.Skipf("driver %s has no concurrency limits", durable[i].Name)
	}
	drv := durable[i].Name
	w := limitWitness(redistest.Prefix(t))
	ctx := context.Background()
	insp, err := conveyor.NewInspector(e.d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := insp.SetLimit(ctx, "q", limitKillKind, limitKillLimit); err != nil {
		t.Fatal(err)
	}
	reqs := make([]conveyor.Request, limitKillJobs)
	for k := range reqs {
		reqs[k] = conveyor.Request{Kind: limitKillKind, Args: []byte(strconv.Itoa(k))}
	}
	for k := 0; k < len(reqs); k += 500 {
		if _, err := e.client.EnqueueMany(ctx, reqs[k:k+500]...); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	names := 0
	spawn := func() *proctest.Child {
		names++
		return proctest.StartTest(t, "TestLimitUnderKills",
			limitKillChildEnv+"="+strconv.Itoa(i), limitKillPrefixEnv+"="+e.prefix,
			limitKillWitnessEnv+"="+string(w), limitKillNameEnv+"=p"+strconv.Itoa(names))
	}
	count := func(f func() (int64, error)) int64 {
		n, err := f()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return n
	}
	running := func() int64 { return count(e.rdb.SCard(ctx, w.running()).Result) }
	starts := func() int64 { return count(e.rdb.Get(ctx, w.starts()).Int64) }
	handled := func() int64 { return count(e.rdb.SCard(ctx, w.handled()).Result) }

	// One process alone: it holds every slot, and is killed.
	first := spawn()
	waitUntil(t, "the first process running the limit's worth of jobs", 30*time.Second, func() (bool, string) {
		n := running()
		return n == limitKillLimit, fmt.Sprintf("%d running", n)
	})
	killWorker(t, first)
	killed := time.Now()
	// Its runs died with it; they hold their slots until their leases run
	// out, so the witness forgets them now: nothing can start meanwhile.
	dead, err := e.rdb.SMembers(ctx, w.running()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range dead {
		if strings.HasPrefix(m, "p1/") {
			e.rdb.SRem(ctx, w.running(), m)
		}
	}
	before := starts()
	var procs [limitKillWorkers]*proctest.Child
	for s := range procs {
		procs[s] = spawn()
	}
	var back time.Duration
	waitUntil(t, "a job started after the kill", limitKillLease+limitKillBack+5*time.Second, func() (bool, string) {
		if starts() > before {
			back = time.Since(killed)
			return true, ""
		}
		return false, fmt.Sprintf("%d starts", starts())
	})
	// The leases ran out between a lease and a heartbeat interval after the
	// kill, as the last extension came up to an interval before it.
	if back < limitKillLease-limitKillHeartbeat-100*time.Millisecond {
		t.Fatalf("a job started %v after the holder of every slot was killed, before its leases (%v, extended every %v) ran out", back, limitKillLease, limitKillHeartbeat)
	}
	if back > limitKillLease+limitKillBack {
		t.Fatalf("jobs started again %v after the kill, want within %v of the lease (%v)", back, limitKillBack, limitKillLease)
	}
	waitUntil(t, "every job handled", limitKillDeadline, func() (bool, string) {
		n := handled()
		return n == limitKillJobs, fmt.Sprintf("%d of %d handled", n, limitKillJobs)
	})
	for _, p := range procs {
		if err := p.Stop(t, 30*time.Second); err != nil {
			t.Fatalf("worker did not stop cleanly: %v", err)
		}
	}
	mx := count(e.rdb.Get(ctx, w.max()).Int64)
	if mx > limitKillLimit {
		t.Fatalf("%d jobs ran at once, over the limit of %d", mx, limitKillLimit)
	}
	if mx < limitKillLimit {
		t.Fatalf("at most %d jobs ran at once: the limit of %d was never reached", mx, limitKillLimit)
	}
	ls, err := insp.Limits(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Running != 0 || ls[0].Waiting != 0 {
		t.Fatalf("after the run, limits %+v, want one with no slot held and nothing waiting", ls)
	}
	t.Logf("%s: %d jobs, limit %d, %d processes of concurrency %d: at most %d ran at once; after a SIGKILL of the holder of every slot, jobs started again %v later (visibility timeout %v); %d runs in all",
		drv, limitKillJobs, limitKillLimit, limitKillWorkers, limitKillConcurrency, mx, back.Round(time.Millisecond), limitKillLease, starts())
	if err := insp.SetLimit(ctx, "q", limitKillKind, 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "nothing left in flight", 30*time.Second, func() (bool, string) {
		left := inFlight(t, e, drv, "q")
		return left == "", left
	})
	assertNoKeys(t, e)
}

// limitKillChild is a worker process of TestLimitUnderKills.
func limitKillChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	w := limitWitness(os.Getenv(limitKillWitnessEnv))
	name := os.Getenv(limitKillNameEnv)
	rdb := redistest.Client(t)
	d := durable[i].Must(t, rdb, os.Getenv(limitKillPrefixEnv))
	var runs sync.Mutex
	n := 0
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		runs.Lock()
		n++
		m := name + "/" + job.ID + "/" + strconv.Itoa(n)
		runs.Unlock()
		if err := limitStart.Run(ctx, rdb, []string{w.running(), w.max(), w.starts()}, m).Err(); err != nil {
			return err
		}
		timer := time.NewTimer(20 * time.Millisecond) // the work
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		}
		// The run leaves the witness before it ends, so that the next run,
		// which its slot lets in, never finds it there.
		if err := rdb.SRem(ctx, w.running(), m).Err(); err != nil {
			return err
		}
		return rdb.SAdd(ctx, w.handled(), job.ID).Err()
	})
	runChild(t, d, h, &worker.Config{
		Queue: "q", Concurrency: limitKillConcurrency, VisibilityTimeout: limitKillLease, HeartbeatInterval: limitKillHeartbeat,
		Logger: childLog(slog.LevelError),
	})
}
