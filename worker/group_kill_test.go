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
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The group kill test runs FIFO groups (conveyor.EnqueueOptions.Group)
// through four worker processes while one of them is SIGKILLed every
// groupKillEvery and started again. Each handler run checks, in one script
// with its start, that no other job of its group is running and that it is
// the next of its group in enqueue order (or the last one again: a run
// whose ack a kill lost); the violations go to a list that must stay
// empty. Some jobs fail twice before they succeed: their group must wait
// for them.
// groupKillGroups: 200 with CONVEYOR_FULL_SIZE=1 (make chaos), 100 in the
// default run.
var groupKillGroups = fullOrShort(200, 100)

const (
	groupKillPerGroup    = 100
	groupKillEnqueuers   = 20
	groupKillWorkers     = 4
	groupKillConcurrency = 50
	groupKillEvery       = 2 * time.Second
	groupKillMin         = 3
	// groupKillLease is the workers' visibility timeout (see killLease).
	groupKillLease     = 3 * time.Second
	groupKillHeartbeat = 500 * time.Millisecond
	groupKillDeadline  = 5 * time.Minute
	// The job at groupKillFailSeq of every groupKillFailEvery-th group fails
	// its first two attempts.
	groupKillFailSeq   = 50
	groupKillFailEvery = 10
)

const (
	groupKillChildEnv   = "CONVEYOR_GROUP_KILL_CHILD"
	groupKillPrefixEnv  = "CONVEYOR_GROUP_KILL_PREFIX"
	groupKillWitnessEnv = "CONVEYOR_GROUP_KILL_WITNESS"
)

// groupWitness names the witness keys under a prefix of their own.
type groupWitness string

func (w groupWitness) running() string    { return string(w) + ":running" }    // HASH group -> seq running
func (w groupWitness) done() string       { return string(w) + ":done" }       // HASH group -> last seq finished
func (w groupWitness) violations() string { return string(w) + ":violations" } // LIST of what went wrong
func (w groupWitness) handled() string    { return string(w) + ":handled" }    // SET "<group>/<seq>" finished
func (w groupWitness) failed() string     { return string(w) + ":failed" }     // HASH "<group>/<seq>" -> failures

// groupStart is run by a handler as it starts job seq of group g.
var groupStart = redis.NewScript(`
local r = redis.call('HGET', KEYS[1], ARGV[1])
if r and r ~= ARGV[2] then
  redis.call('RPUSH', KEYS[3], 'group ' .. ARGV[1] .. ': job ' .. ARGV[2] .. ' started while ' .. r .. ' ran')
end
local d = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
local s = tonumber(ARGV[2])
if s ~= d + 1 and s ~= d then
  redis.call('RPUSH', KEYS[3], 'group ' .. ARGV[1] .. ': job ' .. s .. ' started after ' .. d .. ' finished')
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 0
`)

// groupEnd is run as it ends: ARGV[3] "ok" (finished) or "fail".
var groupEnd = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
local k = ARGV[1] .. '/' .. ARGV[2]
if ARGV[3] == 'ok' then
  local d = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
  if tonumber(ARGV[2]) > d then
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  end
  redis.call('SADD', KEYS[3], k)
else
  redis.call('HINCRBY', KEYS[4], k, 1)
end
return 0
`)

// TestGroupOrderUnderKills is not parallel with the package's other tests
// (its drivers run in parallel with each other): its 400 workers load the
// machine enough to delay the heartbeats of TestKillWorkers running beside
// it, whose jobs were then discarded as poison under a full make test.
func TestGroupOrderUnderKills(t *testing.T) {
	crashTestApart(t, groupKillChildEnv, groupKillChild, groupKillRun)
}

func groupKillRun(t *testing.T, i int) {
	e := newEnv(t, i)
	if !e.d.Capabilities().Groups {
		t.Skipf("driver %s has no FIFO groups", durable[i].Name)
	}
	w := groupWitness(redistest.Prefix(t))
	ctx := context.Background()
	total := int64(groupKillGroups * groupKillPerGroup)

	spawn := func() *proctest.Child {
		return proctest.StartTest(t, "TestGroupOrderUnderKills",
			groupKillChildEnv+"="+strconv.Itoa(i), groupKillPrefixEnv+"="+e.prefix, groupKillWitnessEnv+"="+string(w))
	}
	var procs [groupKillWorkers]*proctest.Child
	for s := range procs {
		procs[s] = spawn()
	}

	// 20 goroutines enqueue while the workers run: each owns every 20th
	// group and enqueues one job of each of its groups per call, in seq
	// order, so each group's enqueue order is its seq order.
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, groupKillEnqueuers)
	for k := range groupKillEnqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range groupKillPerGroup {
				var reqs []conveyor.Request
				for g := k; g < groupKillGroups; g += groupKillEnqueuers {
					reqs = append(reqs, conveyor.Request{Kind: "step", Args: []byte(fmt.Sprintf("%d/%d", g, seq)),
						Opts: &conveyor.EnqueueOptions{Group: "g" + strconv.Itoa(g)}})
				}
				if _, err := e.client.EnqueueMany(ctx, reqs...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("enqueue: %v", err)
	}
	t.Logf("%d jobs of %d groups enqueued by %d goroutines in %v", total, groupKillGroups, groupKillEnqueuers, time.Since(began).Round(time.Millisecond))

	kill := time.NewTicker(groupKillEvery)
	defer kill.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	deadline := time.NewTimer(groupKillDeadline)
	defer deadline.Stop()
	handled := func() int64 {
		n, err := e.rdb.SCard(ctx, w.handled()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	kills := 0
	var atLastKill int64 // the witness's count at the last kill
run:
	for {
		select {
		case <-kill.C:
			h := handled()
			if h == total {
				break run
			}
			if !killDue(h, atLastKill, total) {
				continue
			}
			atLastKill = h
			s := kills % groupKillWorkers
			killWorker(t, procs[s])
			kills++
			procs[s] = spawn()
		case <-poll.C:
			if handled() == total {
				break run
			}
			if recs := deadRecords(t, e, "q"); len(recs) > 0 {
				t.Fatalf("after %d kills, %d jobs discarded, e.g. %q", kills, len(recs), recs[0].Reason)
			}
		case <-deadline.C:
			t.Fatalf("after %v and %d kills the witness holds %d of %d jobs", groupKillDeadline, kills, handled(), total)
		}
	}
	took := time.Since(began)
	drv := durable[i].Name
	waitUntil(t, "nothing left in flight", 30*time.Second, func() (bool, string) {
		left := inFlight(t, e, drv, "q")
		return left == "", left
	})
	for _, p := range procs {
		if err := p.Stop(t, 30*time.Second); err != nil {
			t.Fatalf("worker did not stop cleanly: %v", err)
		}
	}
	if kills < groupKillMin {
		t.Fatalf("only %d kills before the work ran out, want at least %d", kills, groupKillMin)
	}
	if v, err := e.rdb.LRange(ctx, w.violations(), 0, 9).Result(); err != nil || len(v) != 0 {
		n, _ := e.rdb.LLen(ctx, w.violations()).Result()
		t.Fatalf("%d violations of group order (%v), e.g.:\n%s", n, err, strings.Join(v, "\n"))
	}
	// Every group finished its last job; every failing job failed twice
	// and then finished, in its place (the order check above).
	done, err := e.rdb.HGetAll(ctx, w.done()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for g := range groupKillGroups {
		if d := done["g"+strconv.Itoa(g)]; d != strconv.Itoa(groupKillPerGroup-1) {
			t.Fatalf("group g%d: last finished job %q, want %d", g, d, groupKillPerGroup-1)
		}
	}
	failed, err := e.rdb.HGetAll(ctx, w.failed()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != groupKillGroups/groupKillFailEvery {
		t.Fatalf("%d jobs failed, want %d: %v", len(failed), groupKillGroups/groupKillFailEvery, failed)
	}
	for k, n := range failed {
		// A kill between a failing run's end and its retry makes the run a
		// recovery, and the job fails once more.
		if c, _ := strconv.Atoi(n); c < 2 {
			t.Fatalf("job %s failed %s times, want 2 or more", k, n)
		}
	}
	t.Logf("%s: %d kills; %d jobs of %d groups ran in order, one at a time per group, in %v; %d jobs failed twice and ran in place",
		drv, kills, total, groupKillGroups, took.Round(time.Millisecond), len(failed))
	assertNoKeys(t, e)
}

// groupKillChild is a worker process of TestGroupOrderUnderKills.
func groupKillChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	w := groupWitness(os.Getenv(groupKillWitnessEnv))
	rdb := redistest.Client(t)
	// Each process holds 50 jobs when it is killed, and every 2 s one is.
	d := uncappedDriver(t, i, rdb, os.Getenv(groupKillPrefixEnv))
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		gs, seq, ok := strings.Cut(string(job.Payload), "/")
		if !ok {
			return fmt.Errorf("payload %q", job.Payload)
		}
		g := "g" + gs
		if err := groupStart.Run(ctx, rdb, []string{w.running(), w.done(), w.violations()}, g, seq).Err(); err != nil {
			return err
		}
		gi, _ := strconv.Atoi(gs)
		outcome := "ok"
		if seq == strconv.Itoa(groupKillFailSeq) && gi%groupKillFailEvery == 0 && job.Retries < 2 {
			outcome = "fail"
		}
		timer := time.NewTimer(time.Duration(10+gi%21) * time.Millisecond) // the work: 10-30 ms
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		}
		keys := []string{w.running(), w.done(), w.handled(), w.failed()}
		if err := groupEnd.Run(ctx, rdb, keys, g, seq, outcome).Err(); err != nil {
			return err
		}
		if outcome == "fail" {
			return fmt.Errorf("job %s/%s fails on attempt %d", g, seq, job.Attempt())
		}
		return nil
	})
	runChild(t, d, h, &worker.Config{
		Queue: "q", Concurrency: groupKillConcurrency, VisibilityTimeout: groupKillLease, HeartbeatInterval: groupKillHeartbeat,
		MaxAttempts: 5, Backoff: func(int) time.Duration { return 20 * time.Millisecond },
		Logger: childLog(slog.LevelError),
	})
}

// uncappedDriver builds durable driver i under prefix without the poison
// cap (MaxRecoveries -1), for the worker processes of the kill tests: when
// a process is SIGKILLed every 2 s, some job is bound, now and then, to be
// in flight in three killed processes in a row (seen on both drivers), and
// the cap would rightly discard it. Poison is not what those tests are
// about: TestPoisonJob and TestRecoveryAtFullSpeed prove the cap under
// kills.
func uncappedDriver(t *testing.T, i int, rdb redis.UniversalClient, prefix string) broker.Driver {
	t.Helper()
	var (
		d   broker.Driver
		err error
	)
	switch durable[i].Name {
	case "list":
		d, err = list.New(rdb, &list.Config{Prefix: prefix, MaxRecoveries: -1})
	case "stream":
		d, err = stream.New(rdb, &stream.Config{Prefix: prefix, MaxRecoveries: -1})
	default:
		t.Fatalf("unknown driver %s", durable[i].Name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// killDue reports whether the kill loop of a kill test may kill the next
// worker: only once the witness has grown by a hundredth of the jobs since
// the last kill. A worker process of the race-detecting test binary takes
// a second or more to start on a loaded 2-core machine, so killing one
// every 2 s whatever happened kills workers that never got to work, and
// the run crawls (seen: 268 of 20,000 jobs after 3 minutes).
func killDue(handled, atLastKill, total int64) bool {
	return handled-atLastKill >= total/100
}
