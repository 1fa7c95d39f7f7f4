package shard_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// TestGroupOrderAcrossPartitions: 60 groups × 30 jobs on a queue of 6
// partitions, enqueued by 6 goroutines (each owns every 6th group and
// enqueues its groups' jobs in order), run by two pools of 16 workers
// that start while the enqueues go on. The groups land in every
// partition; every group's jobs run one at a time and in enqueue order,
// each once, and one job in every 10th group fails once and runs again in
// its place.
func TestGroupOrderAcrossPartitions(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"list", "stream"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			const (
				q        = "orders"
				groups   = 60
				perGroup = 30
				parts    = 6
			)
			prefix := redistest.Prefix(t)
			open := func() *shard.Driver {
				rdb := brokertest.Client(t)
				in := innerDriver(t, driver, rdb, prefix)
				d, err := shard.New(in, shard.Config{Queues: map[string]int{q: parts}})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			d := open()
			client, err := conveyor.NewClient(d, nil)
			if err != nil {
				t.Fatal(err)
			}

			var (
				mu      sync.Mutex
				running = map[string]bool{}
				next    = map[string]int{} // the seq each group must run next
				failed  = map[string]bool{}
				runs    int
				bad     []string
				done    = make(chan struct{})
			)
			mux := worker.NewMux()
			mux.HandleFunc("step", func(ctx context.Context, job *conveyor.Job) error {
				g, s, _ := strings.Cut(string(job.Payload), "/")
				seq, _ := strconv.Atoi(s)
				mu.Lock()
				if running[g] {
					bad = append(bad, fmt.Sprintf("%s/%d started while another job of its group ran", g, seq))
				}
				if seq != next[g] {
					bad = append(bad, fmt.Sprintf("%s/%d started when %s/%d was next", g, seq, g, next[g]))
				}
				running[g] = true
				fail := seq == 7 && strings.HasSuffix(g, "0") && !failed[g]
				mu.Unlock()
				time.Sleep(time.Millisecond) // a handler's work: room for a race to show
				mu.Lock()
				defer mu.Unlock()
				running[g] = false
				if fail {
					failed[g] = true
					return conveyor.RetryAfter(time.Millisecond, fmt.Errorf("failing %s/%d once", g, seq))
				}
				next[g] = seq + 1
				runs++
				if runs == groups*perGroup {
					close(done)
				}
				return nil
			})
			for range 2 {
				p, err := worker.NewPool(open(), mux, &worker.Config{Queue: q, Concurrency: 16})
				if err != nil {
					t.Fatal(err)
				}
				drivertest.Background(t, p.Run)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, parts)
			for k := range parts {
				wg.Go(func() {
					for seq := range perGroup {
						var reqs []conveyor.Request
						for g := k; g < groups; g += parts {
							reqs = append(reqs, conveyor.Request{Kind: "step", Args: []byte(fmt.Sprintf("g%d/%d", g, seq)),
								Opts: &conveyor.EnqueueOptions{Queue: q, Group: "g" + strconv.Itoa(g)}})
						}
						if _, err := client.EnqueueMany(ctx, reqs...); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("enqueue: %v", err)
			}

			// The groups spread over the partitions: each partition has
			// processed or holds jobs.
			in := d.Inner().(broker.Inspector)
			select {
			case <-done:
			case <-ctx.Done():
				mu.Lock()
				t.Fatalf("%d of %d jobs ran within 2 minutes; violations: %q", runs, groups*perGroup, bad)
			}
			sizes, err := in.QueueSizes(ctx, d.Partitions(q)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sizes {
				if s.Processed == 0 {
					t.Errorf("partition %s processed no job: the groups did not spread (sizes %+v)", s.Queue, sizes)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Fatalf("%d order violations, first: %q", len(bad), bad[:min(5, len(bad))])
			}
			for g := range groups {
				if n := next["g"+strconv.Itoa(g)]; n != perGroup {
					t.Errorf("group g%d ran up to %d, want %d", g, n, perGroup)
				}
			}
			if len(failed) != groups/10 {
				t.Errorf("%d groups had a job fail once, want %d", len(failed), groups/10)
			}
		})
	}
}

// innerDriver builds the durable driver called name (list or stream) on
// rdb, its keys under prefix.
func innerDriver(t *testing.T, name string, rdb redis.UniversalClient, prefix string) broker.Driver {
	t.Helper()
	td, ok := drivertest.Named(name)
	if !ok {
		t.Fatalf("no durable driver %q", name)
	}
	return td.Must(t, rdb, prefix)
}
