package worker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The registry test runs three worker processes (this test binary
// re-executed), each running two jobs, reads them through
// Inspector.Workers, SIGKILLs one and stops the others.
const (
	regChildEnv  = "CONVEYOR_REGISTRY_CHILD"  // driver index, set in the child
	regPrefixEnv = "CONVEYOR_REGISTRY_PREFIX" // key prefix shared with the child
	regInterval  = 200 * time.Millisecond     // the children's RegistryInterval
	regTTL       = 3 * regInterval            // their entries' TTL
	regChildren  = 3
	regPerChild  = 2 // each child's concurrency, and the jobs it holds
)

// regRunning names the SET of the job IDs a child's handlers started.
func regRunning(prefix string, pid int) string {
	return prefix + ":reg-running:" + strconv.Itoa(pid)
}

func TestWorkerRegistry(t *testing.T) { crashTest(t, regChildEnv, registryChild, registryRun) }

func registryRun(t *testing.T, i int) {
	e := newEnv(t, i)
	ctx := context.Background()
	// Each pool holds up to twice its concurrency (its waiting room):
	// enough jobs that every child fills it and runs regPerChild.
	for j := range 2 * regChildren * regPerChild {
		if _, err := e.client.Enqueue(ctx, "hold", []byte(strconv.Itoa(j)), nil); err != nil {
			t.Fatal(err)
		}
	}
	ins, err := conveyor.NewInspector(e.d, nil)
	if err != nil {
		t.Fatal(err)
	}
	children := map[int]*proctest.Child{}
	for range regChildren {
		c := proctest.StartTest(t, "TestWorkerRegistry", regChildEnv+"="+strconv.Itoa(i), regPrefixEnv+"="+e.prefix)
		children[c.Cmd.Process.Pid] = c
	}

	// Every child registered, with the jobs its handlers say they run.
	host, _ := os.Hostname()
	var ws []*conveyor.WorkerInfo
	waitUntil(t, "3 workers registered, each running the jobs its handlers started", 30*time.Second, func() (bool, string) {
		ws, err = ins.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != regChildren {
			return false, fmt.Sprintf("%d workers", len(ws))
		}
		for _, w := range ws {
			if children[w.PID] == nil {
				t.Fatalf("worker %s has PID %d, no child's", w.ID, w.PID)
			}
			started, err := e.rdb.SMembers(ctx, regRunning(e.prefix, w.PID)).Result()
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range w.Running {
				ids = append(ids, r.ID)
				if r.Kind != "hold" || r.Queue != "q" || r.StartedAt.IsZero() {
					t.Fatalf("worker %s: running job %+v", w.ID, r)
				}
			}
			slices.Sort(ids)
			slices.Sort(started)
			if len(started) != regPerChild || !slices.Equal(ids, started) || w.RunningTotal != regPerChild {
				return false, fmt.Sprintf("worker %d runs %v (total %d), its handlers started %v", w.PID, ids, w.RunningTotal, started)
			}
			if w.Host != host || !slices.Equal(w.Queues, []string{"q"}) || w.Concurrency != regPerChild || w.Version == "" || w.StartedAt.IsZero() {
				t.Fatalf("worker entry %+v", w)
			}
		}
		return true, ""
	})

	// A SIGKILLed process leaves the registry within its entry's TTL.
	victim := ws[0]
	killWorker(t, children[victim.PID])
	killed := time.Now()
	delete(children, victim.PID)
	waitUntil(t, "the killed worker to leave the registry", 30*time.Second, func() (bool, string) {
		ws, err = ins.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == victim.ID {
				return false, "still registered"
			}
		}
		return true, ""
	})
	if gone := time.Since(killed); gone > regTTL+time.Second {
		t.Fatalf("the killed worker left the registry %v after its death; its TTL is %v", gone, regTTL)
	}
	if len(ws) != regChildren-1 {
		t.Fatalf("%d workers left after one was killed, want %d", len(ws), regChildren-1)
	}

	// A pool that stops removes its entry before Run returns.
	for _, c := range children {
		if err := c.Stop(t, 30*time.Second); err != nil {
			t.Fatalf("child ended with %v", err)
		}
	}
	if ws, err = ins.Workers(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("after the others stopped: %d workers (%v), want none", len(ws), err)
	}
}

// registryChild is a worker process of TestWorkerRegistry: a pool whose
// handlers note their job and hold it until the pool stops.
func registryChild(t *testing.T, idx string) {
	i, _ := strconv.Atoi(idx)
	prefix := os.Getenv(regPrefixEnv)
	rdb := redistest.Client(t)
	d := durable[i].Must(t, rdb, prefix)
	running := regRunning(prefix, os.Getpid())
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		if err := rdb.SAdd(ctx, running, job.ID).Err(); err != nil {
			return err
		}
		<-ctx.Done() // held until the pool stops
		return ctx.Err()
	})
	runChild(t, d, h, &worker.Config{
		Queue: "q", Concurrency: regPerChild, RegistryInterval: regInterval, ShutdownGrace: 10 * time.Millisecond,
	})
}
