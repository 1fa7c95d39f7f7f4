package delay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// TestCancelRacesPromotion: 1,000 timers due at one instant T, a pool
// consuming the queue, and 1,000 goroutines cancelling one timer each at T.
// For every timer exactly one side wins: a Cancel that returned true means
// the job never runs; false means it runs exactly once.
//
// With the pool's own promoter (batch 1000) the 1,000 timers move in one
// script, so the cancels split into those before it and those after. The
// "batch10x2" variant promotes through two promoters moving 10 timers a
// call instead, so that cancels interleave with about a hundred promotion
// scripts.
func TestCancelRacesPromotion(t *testing.T) {
	t.Parallel()
	variants := []struct {
		name      string
		promoters int // run beside a pool without its own promoter; 0: the pool's
		batch     int
	}{{"pool", 0, 0}, {"batch10x2", 2, 10}}
	for _, td := range timerDrivers {
		for _, v := range variants {
			t.Run(td.Name+"/"+v.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				rdb := redistest.Client(t)
				prefix := redistest.Prefix(t)
				d := td.Must(t, rdb, prefix)
				const (
					n     = 1000
					queue = "q"
				)
				var (
					mu      sync.Mutex
					handled = map[string]int{}
					changed = make(chan struct{}, 1)
				)
				h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
					mu.Lock()
					handled[job.ID]++
					mu.Unlock()
					select {
					case changed <- struct{}{}:
					default:
					}
					return nil
				})
				p, err := worker.NewPool(d, h, &worker.Config{Queue: queue, Concurrency: 50, NoPromoter: v.promoters > 0})
				if err != nil {
					t.Fatal(err)
				}
				stop := drivertest.Background(t, p.Run)
				promoters := make([]*delay.Promoter, v.promoters)
				for i := range promoters {
					if promoters[i], err = delay.NewPromoter(d, queue, &delay.PromoterConfig{Batch: v.batch}); err != nil {
						t.Fatal(err)
					}
					defer drivertest.Background(t, promoters[i].Run)()
				}
				// The cancellers have a client of their own, warmed up (the
				// script loaded, the connections open) by cancelling timers that
				// do not exist, so that at T they race the promotion and not the
				// dialling of connections.
				crdb := redistest.NewClient(t)
				tm := td.Must(t, crdb, prefix).(broker.Timers)
				var warm sync.WaitGroup
				for i := range 64 {
					warm.Go(func() {
						if ok, err := tm.Cancel(ctx, queue, fmt.Sprintf("none-%d", i)); ok || err != nil {
							t.Errorf("Cancel of a timer that does not exist: %v, %v; want false, nil", ok, err)
						}
					})
				}
				warm.Wait()

				at := time.Now().Add(time.Second)
				msgs := make([]*broker.Message, n)
				for i := range msgs {
					msgs[i] = &broker.Message{ID: fmt.Sprintf("race-%04d", i), Kind: "timer", Queue: queue, RunAt: at}
				}
				if err := d.Enqueue(ctx, msgs); err != nil {
					t.Fatal(err)
				}
				if z, _, err := timerCounts(ctx, td, rdb, prefix, queue); err != nil || z != n {
					t.Fatalf("after enqueue: %d timers pending (err %v), want %d: the enqueue took too long?", z, err, n)
				}

				// Every canceller waits for T, the instant the timers are due:
				// the race under test, not a synchronisation.
				gate := make(chan struct{})
				fire := time.AfterFunc(time.Until(at), func() { close(gate) })
				defer fire.Stop()
				won := make([]bool, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i, m := range msgs {
					wg.Go(func() {
						<-gate
						won[i], errs[i] = tm.Cancel(ctx, queue, m.ID)
					})
				}
				wg.Wait()
				wins := 0
				for i, err := range errs {
					if err != nil {
						t.Fatalf("Cancel(%s): %v", msgs[i].ID, err)
					}
					if won[i] {
						wins++
					}
				}

				// Wait until every timer whose cancel lost has run, then until
				// nothing is left anywhere that could still run.
				deadline := time.After(60 * time.Second)
				for {
					mu.Lock()
					missing := 0
					for i, m := range msgs {
						if !won[i] && handled[m.ID] == 0 {
							missing++
						}
					}
					mu.Unlock()
					if missing == 0 {
						break
					}
					select {
					case <-changed:
					case <-deadline:
						t.Fatalf("%d promoted timers never ran", missing)
					}
				}
				waitUntil(t, "the queue to be empty (nothing ready, leased or delayed)", 30*time.Second, func() (bool, error) {
					left, err := queueLeft(ctx, td, rdb, prefix, queue)
					return left == 0, err
				})
				stop()

				mu.Lock()
				defer mu.Unlock()
				for i, m := range msgs {
					c := handled[m.ID]
					switch {
					case won[i] && c != 0:
						t.Errorf("timer %s: Cancel returned true but the job ran %d times", m.ID, c)
					case !won[i] && c != 1:
						t.Errorf("timer %s: Cancel returned false but the job ran %d times, want once", m.ID, c)
					}
					delete(handled, m.ID)
				}
				if len(handled) != 0 {
					t.Errorf("jobs that were never enqueued ran: %v", handled)
				}
				if _, h, err := timerCounts(ctx, td, rdb, prefix, queue); err != nil || h != 0 {
					t.Errorf("timers hash holds %d bodies at the end (err %v)", h, err)
				}
				t.Logf("of %d cancels at the due instant, %d won (the job did not run) and %d lost (it ran once)", n, wins, n-wins)
			})
		}
	}
}

// queueLeft counts what could still run in queue: ready, leased (in
// flight) and delayed messages.
func queueLeft(ctx context.Context, td drivertest.Driver, rdb redis.UniversalClient, prefix, queue string) (int64, error) {
	delayed, _, err := timerCounts(ctx, td, rdb, prefix, queue)
	if err != nil {
		return 0, err
	}
	// The stream driver deletes settled entries, so the stream's length
	// counts both ready and pending entries.
	ready, err := td.ReadyLen(ctx, rdb, prefix, queue)
	if err != nil {
		return 0, err
	}
	var leased int64
	if strings.HasPrefix(td.Name, "list") {
		for _, p := range td.Parts(queue) {
			n, err := rdb.ZCard(ctx, keys.Queue(prefix, p).Part("lease")).Result()
			if err != nil {
				return 0, err
			}
			leased += n
		}
	}
	return delayed + ready + leased, nil
}
