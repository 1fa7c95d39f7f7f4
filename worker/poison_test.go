package worker_test

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The poison test runs a job whose handler SIGKILLs its own worker process,
// restarting the worker after each death. After broker.DefaultMaxRecoveries
// deliveries the job must be in the discard queue as poison, and the worker
// started next must keep running jobs.
const (
	poisonChildEnv   = "CONVEYOR_POISON_CHILD"   // driver index, set in the child
	poisonPrefixEnv  = "CONVEYOR_POISON_PREFIX"  // the queue's key prefix
	poisonWitnessEnv = "CONVEYOR_POISON_WITNESS" // prefix of the witness keys
	poisonLease      = 500 * time.Millisecond
)

type poisonWitness string

func (w poisonWitness) deliveries() string { return string(w) + ":deliveries" } // LIST of "<recoveries> <attempt>", one per poison run
func (w poisonWitness) handled() string    { return string(w) + ":handled" }    // HASH payload of a normal job -> runs acked
func (w poisonWitness) acked() string      { return string(w) + ":acked" }      // LIST of the payloads of normal jobs acked
func (w poisonWitness) started() string    { return string(w) + ":started" }    // LIST: the normal job's first run started

func TestPoisonJob(t *testing.T) { crashTest(t, poisonChildEnv, poisonChild, poisonRun) }

func poisonRun(t *testing.T, i int) {
	e := newEnv(t, i)
	w := poisonWitness(redistest.Prefix(t))
	ctx := context.Background()
	// A normal job is enqueued with the poison one, so the first worker
	// fetches both, and the poison handler kills its process while the
	// normal job runs: the normal job dies with it and counts a recovery
	// too. It must not be discarded with the poison job: recovered jobs come
	// back in batches (the normal job may run beside the poison job again,
	// and finish or die with it), but on its last chance a job is fetched
	// alone and the pool fetches nothing more while it holds one, so the
	// poison job dies alone then.
	ms, err := e.client.EnqueueMany(ctx,
		conveyor.Request{Kind: "poison"},
		conveyor.Request{Kind: "normal", Args: []byte("before")})
	if err != nil {
		t.Fatal(err)
	}
	poison := ms[0]
	spawn := func() *proctest.Child {
		return proctest.StartTest(t, "TestPoisonJob",
			poisonChildEnv+"="+strconv.Itoa(i), poisonPrefixEnv+"="+e.prefix, poisonWitnessEnv+"="+string(w))
	}
	dead := keys.Queue(e.prefix, "q").Part("dead")

	// Start a worker again each time the job kills one, until the job is
	// in the discard queue.
	const k = broker.DefaultMaxRecoveries
	deaths := 0
	p := spawn()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := e.rdb.LLen(ctx, dead).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case <-p.Done():
			if !p.Killed() {
				t.Fatalf("worker ended with %v, want killed by its poison job", p.Err())
			}
			deaths++
			if deaths > k {
				t.Fatalf("the poison job killed %d workers and is still not discarded", deaths)
			}
			p = spawn()
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("after %d worker deaths the poison job is not in the discard queue", deaths)
		}
	}

	// The worker that found the job expired a K-th time discarded it and
	// keeps working: it runs the job enqueued before and one enqueued now.
	if _, err := e.client.Enqueue(ctx, "normal", []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both normal jobs run", 30*time.Second, func() (bool, string) {
		if p.Exited() {
			t.Fatalf("the worker died after the poison job was discarded: %v", p.Err())
		}
		h, err := e.rdb.HGetAll(ctx, w.handled()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return h["before"] != "" && h["after"] != "", "normal jobs run: " + strings.Join(slices.Sorted(maps.Keys(h)), ",")
	})
	drv := durable[i].Name
	waitUntil(t, "nothing left in flight", 10*time.Second, func() (bool, string) {
		left := inFlight(t, e, drv, "q")
		return left == "", left
	})
	if err := p.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("the last worker did not stop cleanly: %v", err)
	}

	if deaths != k {
		t.Errorf("the poison job killed %d workers, want %d", deaths, k)
	}
	runs, err := e.rdb.LRange(ctx, w.deliveries(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for r := range k {
		want = append(want, strconv.Itoa(r)+" 0") // Recoveries r, Retries 0
	}
	if !slices.Equal(runs, want) {
		t.Errorf("poison deliveries (recoveries attempt) %q, want %q", runs, want)
	}
	recs := deadRecords(t, e, "q")
	if len(recs) != 1 {
		for _, r := range recs {
			var m broker.Message
			_, _ = codec.Decode(r.Message, &m)
			t.Logf("discarded %s (%s, payload %q, recoveries %d): %s", m.ID, m.Kind, m.Payload, m.Recoveries, r.Reason)
		}
		t.Fatalf("discard queue holds %d records, want 1", len(recs))
	}
	if !strings.HasPrefix(recs[0].Reason, broker.PoisonReason) {
		t.Errorf("discard reason %q, want it to start with %q", recs[0].Reason, broker.PoisonReason)
	}
	var got broker.Message
	if _, err := codec.Decode(recs[0].Message, &got); err != nil {
		t.Fatalf("discarded message: %v", err)
	}
	if got.ID != poison.ID || got.Kind != "poison" || got.Recoveries != k || got.Retries != 0 {
		t.Errorf("discarded %s (%s) with Recoveries %d, Retries %d; want %s (poison), %d, 0",
			got.ID, got.Kind, got.Recoveries, got.Retries, poison.ID, k)
	}
	h, err := e.rdb.HGetAll(ctx, w.handled()).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A run of the normal job beside the poison job may finish and be
	// noted just before the kill, its ack lost with the process: then it
	// runs once more.
	if b, _ := strconv.Atoi(h["before"]); b < 1 || b > 2 || h["after"] != "1" || len(h) != 2 {
		t.Errorf("normal jobs run to the end %v, want before once (or twice) and after once", h)
	}
	// The queue holds only its discard list now.
	ks := redistest.Keys(t, e.rdb, e.prefix)
	if len(ks) != 1 || ks[0] != dead {
		t.Errorf("keys left %q, want only %s", ks, dead)
	}
	t.Logf("%s: %d workers killed by the poison job; discarded with %q; normal jobs acked %v", drv, deaths, recs[0].Reason, h)
}

// poisonChild is a worker process of TestPoisonJob: a "poison" job notes its
// delivery and SIGKILLs the process (its first delivery once the normal
// job's first run has started, so that one dies with it); a "normal" job's
// first run blocks until the process dies, later runs ack and note it.
func poisonChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	w := poisonWitness(os.Getenv(poisonWitnessEnv))
	rdb := redistest.Client(t)
	d := durable[i].Must(t, rdb, os.Getenv(poisonPrefixEnv))
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		if job.Kind == "poison" {
			if err := rdb.RPush(ctx, w.deliveries(), strconv.Itoa(job.Recoveries)+" "+strconv.Itoa(job.Retries)).Err(); err != nil {
				return err
			}
			// The first time, die once the job enqueued with this one runs
			// (see poisonRun), blocking on Redis until then: BLMOVE of a
			// list onto itself returns as soon as the list is non-empty.
			if job.Recoveries == 0 {
				if err := rdb.BLMove(ctx, w.started(), w.started(), "RIGHT", "RIGHT", 20*time.Second).Err(); err != nil {
					return err
				}
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			<-ctx.Done() // not reached
			return ctx.Err()
		}
		if string(job.Payload) == "before" && job.Recoveries == 0 {
			if err := rdb.RPush(ctx, w.started(), "before").Err(); err != nil {
				return err
			}
			<-ctx.Done() // the poison job kills the process first
			return ctx.Err()
		}
		// Noted before the ack: a process killed between the two (by a
		// poison job running beside this one) loses no finished run.
		if err := rdb.HIncrBy(ctx, w.handled(), string(job.Payload), 1).Err(); err != nil {
			return err
		}
		if err := job.Ack(ctx); err != nil {
			return err
		}
		return rdb.RPush(ctx, w.acked(), string(job.Payload)).Err()
	})
	runChild(t, d, h, &worker.Config{
		Queue: "q", Concurrency: 4, VisibilityTimeout: poisonLease,
		Logger: childLog(slog.LevelWarn),
	})
}
