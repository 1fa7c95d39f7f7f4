package delay_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// Parameters of the "cron" child, in its environment.
const (
	cronChild       = "cron"
	cronPrefixEnv   = "CONVEYOR_CRON_PREFIX"  // key prefix shared with the parent
	cronDriverEnv   = "CONVEYOR_CRON_DRIVER"  // "list" or "stream"
	cronQueueEnv    = "CONVEYOR_CRON_QUEUE"   // the queue the fires go to
	cronKillLookTTL = 1500 * time.Millisecond // the children's Lookahead
)

func init() { children[cronChild] = runCronChild }

// cronReadyKey is the LIST each cron child pushes its pid to once its Cron
// is about to run.
func cronReadyKey(prefix string) string { return prefix + ":test:cron-ready" }

// runCronChild is the "cron" child: a Cron on the real clock with a
// per-second entry, until it is killed.
func runCronChild(ctx context.Context) error {
	prefix, queue := os.Getenv(cronPrefixEnv), os.Getenv(cronQueueEnv)
	d, rdb, err := childDriver(os.Getenv(cronDriverEnv), prefix)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := delay.NewCron(d, &delay.CronConfig{Queue: queue, Lookahead: cronKillLookTTL})
	if err != nil {
		return err
	}
	if err := c.Add(delay.CronEntry{Name: "tick", Spec: "* * * * * *", Kind: "tick"}); err != nil {
		return err
	}
	if err := rdb.RPush(ctx, cronReadyKey(prefix), os.Getpid()).Err(); err != nil {
		return err
	}
	return c.Run(ctx)
}

// TestCronUnderKill: three processes run the same per-second entry on the
// real clock. One is SIGSTOPped for three fires while another is SIGKILLed;
// then the stopped one resumes (behind the series) and the dead one is
// restarted; then the two old ones are killed and the restarted one goes
// on alone. Every second from the first fire to the last is delivered
// exactly once: no fire lost while a process died, none doubled by the
// process that woke up late.
func TestCronUnderKill(t *testing.T) {
	t.Parallel()
	for _, td := range timerDrivers {
		t.Run(td.Name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			const queue = "cron"
			log := collectFires(t, td, prefix, queue)
			rdb := redistest.NewClient(t)
			start := func() *proctest.Child {
				c := startChild(t, cronChild, cronPrefixEnv+"="+prefix, cronDriverEnv+"="+td.Name, cronQueueEnv+"="+queue)
				if err := rdb.BLPop(context.Background(), 30*time.Second, cronReadyKey(prefix)).Err(); err != nil {
					t.Fatalf("cron child did not start within 30s: %v", err)
				}
				return c
			}
			kids := []*proctest.Child{start(), start(), start()}
			seen := 2
			log.waitFires(t, "tick", seen)
			// step waits for n more fires; n = 3 outlasts the fires a dead
			// or stopped child may have stored ahead (Lookahead 1.5s), so
			// the living ones must have stored some.
			step := func(n int) { seen += n; log.waitFires(t, "tick", seen) }
			signal := func(c *proctest.Child, sig syscall.Signal) {
				if err := c.Cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			}

			signal(kids[1], syscall.SIGSTOP) // a stalled process...
			kids[0].Kill(t)                  // ...and a dead one
			step(3)
			signal(kids[1], syscall.SIGCONT) // wakes up behind the series
			kids[0] = start()
			step(3)
			kids[1].Kill(t)
			kids[2].Kill(t) // only the restarted one is left
			step(3)
			kids[0].Kill(t)
			log.drain(t)

			got := log.fires(t, "tick")
			var ats []time.Time
			for at, n := range got {
				ats = append(ats, at)
				if n != 1 {
					t.Errorf("fire %s delivered %d times", at.Format(time.RFC3339), n)
				}
			}
			slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
			if len(ats) < seen {
				t.Fatalf("%d fires, want at least %d", len(ats), seen)
			}
			var gaps []string
			for i := 1; i < len(ats); i++ {
				if d := ats[i].Sub(ats[i-1]); d != time.Second {
					gaps = append(gaps, fmt.Sprintf("%s after %s", ats[i].Format(time.RFC3339), ats[i-1].Format(time.RFC3339)))
				}
			}
			if len(gaps) > 0 {
				t.Errorf("fires missing between: %v", gaps)
			}
			t.Logf("%d fires from %s to %s", len(ats), ats[0].Format(time.RFC3339), ats[len(ats)-1].Format(time.RFC3339))
		})
	}
}
