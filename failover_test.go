package conveyor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redisha"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// The failover tests kill the master under load, producers and a pool
// running, and check that both carry on by themselves on the promoted
// replica and that, with WaitReplicas, no job whose Enqueue returned nil
// is lost. Without it they count the jobs lost (Redis replicates
// asynchronously) and log them with how long processing stopped: the
// figures docs/scale-out.md quotes.

// TestFailoverSentinel: a master with a replica under three Sentinels.
func TestFailoverSentinel(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		for _, wait := range []int{1, 0} {
			t.Run(fmt.Sprintf("%s/wait=%d", drv.Name, wait), func(t *testing.T) {
				t.Parallel()
				// Two replicas: after the failover the new master still has
				// one to wait for.
				s := redisha.SentinelT(t, &redisha.SentinelConfig{Replicas: 1 + wait})
				rdb := redis.NewFailoverClient(&redis.FailoverOptions{
					MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(),
					DialTimeout: 500 * time.Millisecond, PoolSize: 32,
				})
				t.Cleanup(func() { _ = rdb.Close() })
				runFailover(t, drv.Name, rdb, wait, func(ctx context.Context) (time.Time, error) {
					old, err := s.KillMaster(ctx)
					if err != nil {
						return time.Time{}, err
					}
					killed := time.Now()
					_, err = s.WaitFailover(ctx, old)
					return killed, err
				})
			})
		}
	}
}

// TestFailoverCluster: 3 masters with a replica each; the master of the
// queue's slot is killed.
func TestFailoverCluster(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		for _, wait := range []int{1, 0} {
			t.Run(fmt.Sprintf("%s/wait=%d", drv.Name, wait), func(t *testing.T) {
				t.Parallel()
				c := redisha.ClusterT(t, &redisha.ClusterConfig{ReplicasPerMaster: 1 + wait})
				rdb := redis.NewClusterClient(&redis.ClusterOptions{
					Addrs: c.Seeds(), DialTimeout: 500 * time.Millisecond, PoolSize: 32,
				})
				t.Cleanup(func() { _ = rdb.Close() })
				runFailover(t, drv.Name, rdb, wait, func(ctx context.Context) (time.Time, error) {
					old, err := c.MasterOfKey(ctx, "{"+failoverQueue+"}")
					if err != nil {
						return time.Time{}, err
					}
					if err := c.KillMaster(ctx, old); err != nil {
						return time.Time{}, err
					}
					killed := time.Now()
					_, err = c.WaitFailover(ctx, old)
					return killed, err
				})
			})
		}
	}
}

const failoverQueue = "orders"

// waitingClient builds the named durable driver on rdb with its
// WaitReplicas and WaitTimeout set, and a client of it whose default queue
// is failoverQueue.
func waitingClient(t *testing.T, driver string, rdb redis.UniversalClient, prefix string, wait int, timeout time.Duration, log *slog.Logger) (broker.Driver, *conveyor.Client) {
	t.Helper()
	var (
		d   broker.Driver
		err error
	)
	if driver == "list" {
		d, err = list.New(rdb, &list.Config{Prefix: prefix, WaitReplicas: wait, WaitTimeout: timeout, Logger: log})
	} else {
		d, err = stream.New(rdb, &stream.Config{Prefix: prefix, WaitReplicas: wait, WaitTimeout: timeout, Logger: log})
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: failoverQueue})
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

// runFailover runs producers and a pool on rdb, kills the master with kill
// once jobs flow, and checks that producing and processing carry on, and
// that with wait (WaitReplicas) every acknowledged job ran.
func runFailover(t *testing.T, driver string, rdb redis.UniversalClient, wait int, kill func(ctx context.Context) (time.Time, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	d, client := waitingClient(t, driver, rdb, "fo", wait, 2*time.Second, quiet)

	var (
		mu        sync.Mutex
		ran       = map[string]int{}
		lastRun   time.Time
		longest   time.Duration // longest gap between two job starts
		gapEnd    time.Time
		processed = make(chan struct{}, 1)
	)
	handler := conveyor.HandlerFunc(func(_ context.Context, job *conveyor.Job) error {
		now := time.Now()
		mu.Lock()
		ran[job.ID]++
		if !lastRun.IsZero() && now.Sub(lastRun) > longest {
			longest, gapEnd = now.Sub(lastRun), now
		}
		lastRun = now
		mu.Unlock()
		select {
		case processed <- struct{}{}:
		default:
		}
		return nil
	})
	pool, err := worker.NewPool(d, handler, &worker.Config{
		Queue: failoverQueue, Concurrency: 8, VisibilityTimeout: 3 * time.Second, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopPool := drivertest.Background(t, pool.Run)
	defer stopPool()

	// Producers: each job is enqueued until a call returns nil (a call
	// that failed may have stored it: the handler counts runs by ID, so a
	// second copy is seen, not mistaken for a loss).
	var (
		acked      sync.Map // ID -> struct{}: Enqueue returned nil
		nAcked     atomic.Int64
		unreplied  atomic.Int64 // ReplicationError: stored, not known to be on a replica
		enqErrs    atomic.Int64
		lastErr    atomic.Value
		stopProd   = make(chan struct{})
		stopOnce   sync.Once
		producers  sync.WaitGroup
		afterKill  atomic.Int64
		killedFlag atomic.Bool
	)
	for g := range 4 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("p%d-%06d", g, i)
				for {
					select {
					case <-stopProd:
						return
					default:
					}
					_, err := client.Enqueue(ctx, "order.timeout", nil, &conveyor.EnqueueOptions{ID: id})
					if err == nil {
						acked.Store(id, struct{}{})
						nAcked.Add(1)
						if killedFlag.Load() {
							afterKill.Add(1)
						}
						break
					}
					if errors.Is(err, broker.ErrNotReplicated) {
						unreplied.Add(1)
						break
					}
					enqErrs.Add(1)
					lastErr.Store(err.Error())
					if ctx.Err() != nil {
						return
					}
					time.Sleep(20 * time.Millisecond) // a producer's back-off, not a test synchronisation
				}
			}
		}()
	}
	stopProducers := func() {
		stopOnce.Do(func() { close(stopProd) })
		producers.Wait()
	}
	defer stopProducers()

	waitUntil(t, ctx, "200 jobs acknowledged before the kill", func() bool { return nAcked.Load() >= 200 }, nil)
	killed, err := kill(ctx)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	killedFlag.Store(true)
	promoted := time.Now()
	after, cancelAfter := context.WithTimeout(ctx, 30*time.Second)
	defer cancelAfter()
	waitUntil(t, after, "200 jobs acknowledged after the failover (producers carry on by themselves)", func() bool {
		return afterKill.Load() >= 200
	}, func() string {
		return fmt.Sprintf("%d acknowledged after the kill, %d stored but not acknowledged by a replica, %d enqueue errors, the last: %v",
			afterKill.Load(), unreplied.Load(), enqErrs.Load(), lastErr.Load())
	})
	stopProducers()

	// Every acknowledged job runs; the pool carries on by itself.
	var missing []string
	deadline := time.Now().Add(45 * time.Second)
	if wait == 0 {
		deadline = time.Now().Add(15 * time.Second) // losses are counted, not failed on
	}
	for {
		missing = missing[:0]
		mu.Lock()
		acked.Range(func(k, _ any) bool {
			if ran[k.(string)] == 0 {
				missing = append(missing, k.(string))
			}
			return true
		})
		mu.Unlock()
		if len(missing) == 0 || (wait == 0 && time.Now().After(deadline)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged jobs never ran after the failover (WaitReplicas %d): %v", len(missing), nAcked.Load(), wait, firstOf(missing, 10))
		}
		select {
		case <-processed:
		case <-time.After(time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	mu.Lock()
	dups := 0
	for _, n := range ran {
		if n > 1 {
			dups++
		}
	}
	gap, gapAt := longest, gapEnd.Sub(killed)
	mu.Unlock()
	t.Logf("%s: failover took %v; acknowledged %d jobs, lost %d, ran twice %d, stored but not acknowledged by a replica %d, enqueue errors %d; longest pause in processing %v (ending %v after the kill)",
		t.Name(), promoted.Sub(killed).Round(time.Millisecond), nAcked.Load(), len(missing), dups, unreplied.Load(), enqErrs.Load(), gap.Round(time.Millisecond), gapAt.Round(time.Millisecond))
}

func firstOf(s []string, n int) []string { return s[:min(n, len(s))] }

// waitUntil polls cond every 10 ms until ctx ends, then fails t with
// what it waited for and state's account of where things stand.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool, state func() string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if state != nil {
				t.Fatalf("waiting for %s: %v (%s)", what, ctx.Err(), state())
			}
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// TestFailoverLagLosesOnlyUnwaited: the replica falls behind (a proxy
// between it and its master holds the replication stream), jobs are
// enqueued, the master is SIGKILLed and the replica promoted. Without
// WaitReplicas every job acknowledged while the replica lagged is lost,
// and only those: the loss is the replication lag's window, counted here.
// With it, those enqueues return a ReplicationError instead of nil, and no
// acknowledged job is lost.
func TestFailoverLagLosesOnlyUnwaited(t *testing.T) {
	t.Parallel()
	for _, drv := range drivertest.Durable {
		for _, wait := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/wait=%d", drv.Name, wait), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				master := redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
				px := redistest.StartProxy(t, master.Addr)
				host, port, _ := strings.Cut(px.Addr, ":")
				replica := redistest.StartServer(t, "--replicaof", host, port, "--repl-diskless-sync-delay", "0")
				mc, rc := master.Client(t), replica.Client(t)
				redistest.Eventually(t, "the replica to sync", func() bool {
					info, err := rc.Info(ctx, "replication").Result()
					return err == nil && strings.Contains(info, "master_link_status:up")
				})
				redistest.Eventually(t, "the master to see its replica online", func() bool {
					info, err := mc.Info(ctx, "replication").Result()
					return err == nil && strings.Contains(info, "state=online")
				})
				open := func(rdb redis.UniversalClient, timeout time.Duration) *conveyor.Client {
					_, c := waitingClient(t, drv.Name, rdb, "lag", wait, timeout, nil)
					return c
				}
				// A long wait while the replica keeps up (a loaded machine
				// can take a while to answer), a short one once it lags.
				patient, lagging := open(mc, 10*time.Second), open(mc, 200*time.Millisecond)
				acked := map[string]bool{}
				c := patient
				enqueue := func(id string) error {
					_, err := c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: id})
					if err == nil {
						acked[id] = true
					}
					return err
				}
				for i := range 20 {
					if err := enqueue(fmt.Sprintf("before-%02d", i)); err != nil {
						t.Fatal(err)
					}
				}
				redistest.Eventually(t, "the replica to hold the first 20 jobs", func() bool {
					n, err := drv.ReadyLen(ctx, rc, "lag", failoverQueue)
					return err == nil && n == 20
				})
				px.Pause() // the replica lags from here on
				c = lagging
				refused := 0
				for i := range 10 {
					err := enqueue(fmt.Sprintf("lagged-%02d", i))
					switch {
					case wait == 0 && err != nil:
						t.Fatalf("Enqueue while the replica lags, without WaitReplicas: %v", err)
					case wait == 1 && !errors.Is(err, broker.ErrNotReplicated):
						t.Fatalf("Enqueue while the replica lags, with WaitReplicas: %v, want a ReplicationError", err)
					case err != nil:
						refused++
					}
				}
				killByPID(t, mc)
				// The replication stream the proxy held dies with the
				// master: the connection is cut before anything held is let
				// through.
				px.Cut()
				px.Resume()
				if err := rc.ReplicaOf(ctx, "no", "one").Err(); err != nil {
					t.Fatal(err)
				}
				// What the promoted replica holds.
				n, err := drv.ReadyLen(ctx, rc, "lag", failoverQueue)
				if err != nil {
					t.Fatal(err)
				}
				lost := len(acked) - int(n)
				t.Logf("acknowledged %d, on the promoted replica %d, lost %d; %d enqueues while it lagged returned a ReplicationError", len(acked), n, lost, refused)
				want := 10 // every job acknowledged while the replica lagged
				if wait == 1 {
					want = 0
				}
				if lost != want {
					t.Fatalf("lost %d acknowledged jobs in the failover, want %d", lost, want)
				}
			})
		}
	}
}

// killByPID SIGKILLs the server c talks to, a server this test started,
// and waits until it no longer answers.
func killByPID(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := syscall.Kill(redistest.PID(t, c), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the killed master to stop answering", func() bool {
		return c.Ping(context.Background()).Err() != nil
	})
}
