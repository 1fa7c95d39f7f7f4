package delay_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// Parameters of the "promoters" child, in its environment.
const (
	promotersChild   = "promoters"
	childPrefixEnv   = "CONVEYOR_DELAY_PREFIX"    // key prefix shared with the parent
	childDriverEnv   = "CONVEYOR_DELAY_DRIVER"    // "list" or "stream"
	childQueueEnv    = "CONVEYOR_DELAY_QUEUE"     // the queue to promote
	childPromoterEnv = "CONVEYOR_DELAY_PROMOTERS" // promoters the child runs
	childTagEnv      = "CONVEYOR_DELAY_TAG"       // the child's field in the stats hash
)

func init() { children[promotersChild] = runPromoters }

// statsKey is the HASH in which each promoters child keeps the number of
// timers its promoters moved, under its tag, so that the parent sees
// that a child took part before it kills it.
func statsKey(prefix string) string { return prefix + ":test:promoted" }

// runPromoters is the "promoters" child: it runs promoters of one queue
// until it is killed, and reports their count of promoted timers every few
// milliseconds.
func runPromoters(ctx context.Context) error {
	prefix, queue, tag := os.Getenv(childPrefixEnv), os.Getenv(childQueueEnv), os.Getenv(childTagEnv)
	n, err := strconv.Atoi(os.Getenv(childPromoterEnv))
	if err != nil || n < 1 {
		return fmt.Errorf("%s=%q: want a positive count", childPromoterEnv, os.Getenv(childPromoterEnv))
	}
	d, rdb, err := childDriver(os.Getenv(childDriverEnv), prefix)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ps := make([]*delay.Promoter, n)
	for i := range ps {
		if ps[i], err = delay.NewPromoter(d, queue, nil); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { _ = p.Run(ctx) })
	}
	// The first report says the child runs.
	if err := rdb.HSet(ctx, statsKey(prefix), tag, 0).Err(); err != nil {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := int64(-1)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		var sum int64
		for _, p := range ps {
			sum += p.Stats().Promoted
		}
		if sum != last {
			if err := rdb.HSet(context.Background(), statsKey(prefix), tag, sum).Err(); err == nil {
				last = sum
			}
		}
	}
	wg.Wait()
	return nil
}

// TestPromoteExactlyOnceUnderKill: 10,000 timers due over 2 s, promoted by
// four promoters in two processes, one of which is SIGKILLed midway. Every
// timer must reach the ready structure exactly once and leave no body
// behind: a promotion is one script, so a kill lands before or after it,
// never inside.
func TestPromoteExactlyOnceUnderKill(t *testing.T) {
	t.Parallel()
	for _, td := range timerDrivers {
		if td.Partitions == 1 {
			continue // a shard.Driver of 1 partition passes promotion through: the plain drivers' runs cover it
		}
		t.Run(td.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			d := td.Must(t, rdb, prefix)
			const (
				n     = 10_000
				queue = "q"
				// Long enough that promotion is still under way when the
				// victim has promoted some: at 2 s, a loaded make test once
				// saw every timer promoted before the kill.
				spread  = 5 * time.Second
				witness = 2_000
			)
			// The children start first, so that however long a process
			// takes to start, the timers fall due while both promote.
			env := []string{childPrefixEnv + "=" + prefix, childDriverEnv + "=" + td.Name,
				childQueueEnv + "=" + queue, childPromoterEnv + "=2"}
			victim := startChild(t, promotersChild, append(env, childTagEnv+"=victim")...)
			survivor := startChild(t, promotersChild, append(env, childTagEnv+"=survivor")...)
			waitUntil(t, "both children running", 60*time.Second, func() (bool, error) {
				if victim.Exited() || survivor.Exited() {
					return false, fmt.Errorf("a child exited on its own")
				}
				running, err := rdb.HLen(ctx, statsKey(prefix)).Result()
				return running == 2, err
			})

			// The first timer is due 8 s from now: the enqueue of 10,000
			// timers took over a second under a full make test on 2 cores,
			// and up to 7 s with six variants and their children beside it.
			first := time.Now().Add(8 * time.Second)
			msgs := make([]*broker.Message, n)
			for i := range msgs {
				msgs[i] = &broker.Message{
					ID: fmt.Sprintf("kill-%05d", i), Kind: "timer", Queue: queue,
					RunAt: first.Add(time.Duration(i) * spread / n),
				}
			}
			for b := 0; b < n; b += 1000 {
				if err := d.Enqueue(ctx, msgs[b:b+1000]); err != nil {
					t.Fatal(err)
				}
			}
			// No promoter moves a timer before it is due, so all are still
			// pending unless the enqueue outlasted the first due time (and
			// some messages were stored as ready at once).
			if z, h, err := timerCounts(ctx, td, rdb, prefix, queue); err != nil || z != n || h != n {
				t.Fatalf("after enqueue: %d delayed, %d bodies (err %v), want %d timers pending: the enqueue took too long?", z, h, err, n)
			}

			// Kill the victim once promotion is well under way and it has
			// promoted timers itself.
			waitUntil(t, fmt.Sprintf("%d timers promoted, some by the victim", witness), 60*time.Second, func() (bool, error) {
				if victim.Exited() || survivor.Exited() {
					return false, fmt.Errorf("a child exited on its own")
				}
				ready, err := td.ReadyLen(ctx, rdb, prefix, queue)
				if err != nil {
					return false, err
				}
				byVictim, err := rdb.HGet(ctx, statsKey(prefix), "victim").Int64()
				if err != nil && err != redis.Nil {
					return false, err
				}
				return ready >= witness && byVictim > 0, nil
			})
			victim.Kill(t)
			left, _, err := timerCounts(ctx, td, rdb, prefix, queue)
			if err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				t.Fatal("every timer was promoted before the kill: the test proves nothing")
			}
			byVictim, _ := rdb.HGet(ctx, statsKey(prefix), "victim").Int64()

			waitUntil(t, "the delayed set to empty", 60*time.Second, func() (bool, error) {
				if survivor.Exited() {
					return false, fmt.Errorf("the surviving child exited")
				}
				z, _, err := timerCounts(ctx, td, rdb, prefix, queue)
				return z == 0, err
			})
			survivor.Kill(t)
			bySurvivor, _ := rdb.HGet(ctx, statsKey(prefix), "survivor").Int64()
			t.Logf("%d timers pending at the kill; promoted by the victim >= %d (last report), by the survivor %d (last report)",
				left, byVictim, bySurvivor)

			if _, h, err := timerCounts(ctx, td, rdb, prefix, queue); err != nil || h != 0 {
				t.Fatalf("timers hash holds %d bodies after every timer was promoted (err %v)", h, err)
			}
			ids := readyIDs(t, td, rdb, prefix, queue)
			count := make(map[string]int, n)
			for _, id := range ids {
				count[id]++
			}
			for _, m := range msgs {
				if c := count[m.ID]; c != 1 {
					t.Errorf("timer %s reached the ready structure %d times, want once", m.ID, c)
				}
				delete(count, m.ID)
			}
			for id, c := range count {
				t.Errorf("ready structure holds %q (%d times), which was never enqueued", id, c)
			}
			if len(ids) != n {
				t.Errorf("ready structure holds %d messages, want %d", len(ids), n)
			}
		})
	}
}

// readyIDs decodes the IDs of every message in queue's ready structure.
func readyIDs(t testing.TB, td drivertest.Driver, rdb redis.UniversalClient, prefix, queue string) []string {
	t.Helper()
	ctx := context.Background()
	var raw []string
	for _, p := range td.Parts(queue) {
		key := td.ReadyKey(prefix, p)
		if strings.HasPrefix(td.Name, "stream") {
			xs, err := rdb.XRange(ctx, key, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range xs {
				v, ok := x.Values["m"].(string)
				if !ok {
					t.Fatalf("stream entry %s has no field m: %v", x.ID, x.Values)
				}
				raw = append(raw, v)
			}
		} else {
			part, err := rdb.LRange(ctx, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			raw = append(raw, part...)
		}
	}
	ids := make([]string, len(raw))
	for i, s := range raw {
		var m broker.Message
		if _, err := codec.Decode([]byte(s), &m); err != nil {
			t.Fatalf("ready message %d: %v", i, err)
		}
		ids[i] = m.ID
	}
	return ids
}

// dueHandler returns a handler that reads each job's due time from its
// payload (unix nanoseconds) and passes its lateness (the handler's start
// minus the due time) to record.
func dueHandler(record func(id string, late time.Duration)) conveyor.Handler {
	return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		now := time.Now()
		ns, err := strconv.ParseInt(string(job.Payload), 10, 64)
		if err != nil {
			return conveyor.SkipRetry(fmt.Errorf("payload %q: %w", job.Payload, err))
		}
		record(job.ID, now.Sub(time.Unix(0, ns)))
		return nil
	})
}

// TestPromoteNeverEarly: timers with due times inside a millisecond run no
// sooner than due, by the handler's clock. The score rounds up to the next
// millisecond and the server's clock decides, so a timer is never early on
// one machine; the lateness figures are logged, not asserted (benchmarks
// measure them).
func TestPromoteNeverEarly(t *testing.T) {
	t.Parallel()
	for _, td := range timerDrivers {
		t.Run(td.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			d := td.Must(t, rdb, prefix)
			const n = 300
			var (
				mu   sync.Mutex
				late = map[string]time.Duration{}
				dup  []string
				all  = make(chan struct{})
			)
			h := dueHandler(func(id string, l time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := late[id]; ok {
					dup = append(dup, id)
				}
				late[id] = l
				if len(late) == n {
					close(all)
				}
			})
			p, err := worker.NewPool(d, h, &worker.Config{Queue: "q", Concurrency: 20})
			if err != nil {
				t.Fatal(err)
			}
			stop := drivertest.Background(t, p.Run)

			base := time.Now().Add(300 * time.Millisecond)
			msgs := make([]*broker.Message, n)
			for i := range msgs {
				// Due times 1.37 ms apart with a sub-millisecond part that
				// varies (0 to 999 µs and some nanoseconds).
				at := base.Add(time.Duration(i)*1370*time.Microsecond + time.Duration(i*7919%1000)*time.Microsecond + 321)
				msgs[i] = &broker.Message{
					ID: fmt.Sprintf("early-%03d", i), Kind: "timer", Queue: "q",
					Payload: strconv.AppendInt(nil, at.UnixNano(), 10), RunAt: at,
				}
			}
			if err := d.Enqueue(ctx, msgs); err != nil {
				t.Fatal(err)
			}
			select {
			case <-all:
			case <-time.After(60 * time.Second):
				t.Fatal("timed out waiting for every timer to run")
			}
			stop()

			mu.Lock()
			defer mu.Unlock()
			if len(dup) > 0 {
				t.Errorf("jobs run more than once: %v", dup)
			}
			ls := make([]time.Duration, 0, n)
			for id, l := range late {
				if l < 0 {
					t.Errorf("job %s started %v before it was due", id, -l)
				}
				ls = append(ls, l)
			}
			slices.Sort(ls)
			t.Logf("lateness of %d timers: min %v, median %v, max %v", len(ls), ls[0], ls[len(ls)/2], ls[len(ls)-1])
		})
	}
}

// commandCounter is a go-redis hook counting the commands a client sends,
// by name.
type commandCounter struct {
	n      atomic.Int64
	mu     sync.Mutex
	byName map[string]int
}

func (c *commandCounter) add(cmds ...redis.Cmder) {
	c.n.Add(int64(len(cmds)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[string]int{}
	}
	for _, cmd := range cmds {
		c.byName[cmd.Name()]++
	}
}

func (c *commandCounter) names() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byName)
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

// TestPromoterIdleLoad: a promoter with no timers sleeps (MaxSleep, 1 s by
// default, between calls) rather than polling: at most 5 commands a second
// (per partition of a split queue).
// The subscription to the wake channel is one command when it starts.
func TestPromoterIdleLoad(t *testing.T) {
	t.Parallel()
	for _, td := range timerDrivers {
		t.Run(td.Name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.NewClient(t)
			var counter commandCounter
			rdb.AddHook(&counter)
			prefix := redistest.Prefix(t)
			d := td.Must(t, rdb, prefix)
			p, err := delay.NewPromoter(d, "q", nil)
			if err != nil {
				t.Fatal(err)
			}
			const idle = 3 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), idle)
			defer cancel()
			began := time.Now()
			if err := p.Run(ctx); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			cmds := counter.n.Load()
			st := p.Stats()
			perSec := float64(cmds) / took.Seconds()
			t.Logf("idle %v: %d commands (%.2f/s: %v), %d promotion calls", took.Round(time.Millisecond), cmds, perSec, counter.names(), st.Calls)
			if cmds < 1 || st.Calls < 1 {
				t.Fatalf("%d commands counted, %d promotion calls: the promoter never looked", cmds, st.Calls)
			}
			// A split queue's promoter looks at each partition (and
			// subscribes to each one's wake channel): 5 a second each.
			if want := 5 * float64(len(td.Parts("q"))); perSec > want {
				t.Fatalf("idle promoter sent %.2f commands a second, want <= %v", perSec, want)
			}
			if st.Promoted != 0 {
				t.Fatalf("promoted %d timers from an empty queue", st.Promoted)
			}
		})
	}
}

// A promoter's config is checked: a sleep bound under 10ms would be a busy
// loop, and the pubsub driver has no timers.
func TestNewPromoterConfig(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	d := timerDrivers[0].Must(t, rdb, redistest.Prefix(t))
	for _, cfg := range []*delay.PromoterConfig{{MaxSleep: time.Millisecond}, {MaxSleep: -time.Second}, {Batch: -1}} {
		if _, err := delay.NewPromoter(d, "q", cfg); err == nil {
			t.Errorf("NewPromoter with %+v: no error", *cfg)
		}
	}
	if _, err := delay.NewPromoter(d, "a{b}", nil); err == nil {
		t.Error("NewPromoter with a queue name with braces: no error")
	}
	if _, err := delay.NewPromoter(d, "q", &delay.PromoterConfig{MaxSleep: 10 * time.Millisecond}); err != nil {
		t.Errorf("NewPromoter with MaxSleep 10ms: %v", err)
	}
	ps, err := pubsub.New(rdb, &pubsub.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delay.NewPromoter(ps, "q", nil); !errors.Is(err, broker.ErrUnsupported) {
		t.Errorf("NewPromoter on the pubsub driver: %v, want ErrUnsupported", err)
	}
}
