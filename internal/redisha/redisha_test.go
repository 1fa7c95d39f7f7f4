package redisha_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor/internal/redisha"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// eventually calls f until it returns nil or d passes, and fails t with
// f's last error then.
func eventually(t *testing.T, d time.Duration, what string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v: %v", what, d, err)
		case <-tick.C:
		}
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	s := redisha.SentinelT(t, nil)
	t.Logf("master, replica and 3 sentinels ready in %v", time.Since(begin).Round(time.Millisecond))
	ctx := t.Context()
	if s.MasterName() != "conveyor" || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("MasterName %q, SentinelAddrs %v; want conveyor and 3 sentinels", s.MasterName(), s.SentinelAddrs())
	}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(),
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	defer rdb.Close()
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// On the replica too, so it survives the fail-over.
	if n, err := rdb.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica to have the write", n, err)
	}

	old, err := s.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	newAddr, err := s.WaitFailover(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinel fail-over %s -> %s took %v", old, newAddr, time.Since(killed).Round(time.Millisecond))
	if newAddr == old {
		t.Fatalf("WaitFailover returned the killed master %s", old)
	}
	if m, err := s.Master(ctx); err != nil || m != newAddr {
		t.Fatalf("Master = %s, %v; want %s", m, err, newAddr)
	}

	eventually(t, 10*time.Second, "the failover client writes through the new master", func(ctx context.Context) error {
		if v, err := rdb.Get(ctx, "before").Result(); err != nil || v != "1" {
			return fmt.Errorf("GET before = %q, %v", v, err)
		}
		return rdb.Set(ctx, "after", "2", 0).Err()
	})
	t.Logf("the failover client wrote through the new master %v after the kill", time.Since(killed).Round(time.Millisecond))
	direct := redis.NewClient(&redis.Options{Addr: newAddr})
	defer direct.Close()
	if v, err := direct.Get(ctx, "after").Result(); err != nil || v != "2" {
		t.Fatalf("GET after on %s = %q, %v; want the failover client's write there", newAddr, v, err)
	}
	if _, err := s.KillMaster(ctx); err != nil {
		t.Fatalf("KillMaster of the new master: %v", err)
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	c := redisha.ClusterT(t, nil)
	t.Logf("3 masters and 3 replicas ready in %v", time.Since(begin).Round(time.Millisecond))
	ctx := t.Context()
	seeds := c.Seeds()
	masters, err := c.Masters(ctx)
	if err != nil || len(masters) != 3 || len(seeds) != 3 {
		t.Fatalf("Masters = %v, %v; Seeds = %v; want 3 of each", masters, err, seeds)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       seeds,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	defer rdb.Close()
	owners := map[string]int{}
	for i := range 30 {
		key := fmt.Sprintf("key:%d", i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		m, err := c.MasterOfKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		owners[m]++
	}
	if len(owners) != 3 {
		t.Fatalf("30 keys landed on %v, want all 3 masters", owners)
	}
	// On every replica too, so the keys survive the fail-over.
	err = rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if n, err := m.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n < 1 {
			return fmt.Errorf("WAIT 1 = %d, %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	const key = "key:0"
	old, err := c.MasterOfKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KillMaster(ctx, old); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	newAddr, err := c.WaitFailover(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster fail-over %s -> %s took %v", old, newAddr, time.Since(killed).Round(time.Millisecond))
	if m, err := c.MasterOfKey(ctx, key); err != nil || m != newAddr {
		t.Fatalf("MasterOfKey(%s) = %s, %v; want %s", key, m, err, newAddr)
	}
	if masters, err := c.Masters(ctx); err != nil || len(masters) != 3 || slices.Contains(masters, old) || !slices.Contains(masters, newAddr) {
		t.Fatalf("Masters = %v, %v; want 3 with %s in place of %s", masters, err, newAddr, old)
	}

	eventually(t, 10*time.Second, "the cluster client writes "+key+" again", func(ctx context.Context) error {
		v, err := rdb.Get(ctx, key).Result()
		if err == nil && v != "0" {
			return fmt.Errorf("GET %s = %q, want 0 (written before the fail-over)", key, v)
		}
		if err == nil {
			err = rdb.Set(ctx, key, "after", 0).Err()
		}
		if err != nil {
			// go-redis re-reads the slot map on a MOVED reply or every
			// ClusterStateReloadInterval (60 s); a dead master sends no
			// MOVED, so a client must ask for it.
			rdb.ReloadState(ctx)
		}
		return err
	})
	t.Logf("the cluster client wrote %s through the new master %v after the kill", key, time.Since(killed).Round(time.Millisecond))
	direct := redis.NewClient(&redis.Options{Addr: newAddr})
	defer direct.Close()
	if v, err := direct.Get(ctx, key).Result(); err != nil || v != "after" {
		t.Fatalf("GET %s on %s = %q, %v; want the cluster client's write there", key, newAddr, v, err)
	}
	if err := c.KillMaster(ctx, old); err == nil {
		t.Fatal("KillMaster of a node already killed succeeded")
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := redisha.StartSentinel(ctx, &redisha.SentinelConfig{Replicas: -1}); err == nil {
		t.Error("StartSentinel with Replicas -1 succeeded")
	}
	if _, err := redisha.StartSentinel(ctx, &redisha.SentinelConfig{MasterName: "a b"}); err == nil {
		t.Error("StartSentinel with a master name holding a space succeeded")
	}
	if _, err := redisha.StartCluster(ctx, &redisha.ClusterConfig{Masters: -3}); err == nil {
		t.Error("StartCluster with Masters -3 succeeded")
	}
	_, err := redisha.StartCluster(ctx, &redisha.ClusterConfig{Bin: "/nonexistent/redis-server"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("StartCluster with a missing binary = %v, want its error at once", err)
	}
}

// TestStartFailureStopsWhatItStarted: a start that runs out of time stops
// the servers it had started and removes their directories.
func TestStartFailureStopsWhatItStarted(t *testing.T) {
	t.Parallel()
	for _, start := range []func(dir string) error{
		func(dir string) error {
			_, err := redisha.StartSentinel(t.Context(), &redisha.SentinelConfig{Dir: dir, StartTimeout: 300 * time.Millisecond})
			return err
		},
		func(dir string) error {
			_, err := redisha.StartCluster(t.Context(), &redisha.ClusterConfig{Dir: dir, StartTimeout: 300 * time.Millisecond})
			return err
		},
	} {
		dir := t.TempDir()
		if err := start(dir); err == nil {
			t.Fatal("a start bounded by 300 ms succeeded; the set-ups take longer")
		} else {
			t.Logf("as expected: %v", err)
		}
		if left, err := os.ReadDir(dir); err != nil || len(left) > 0 {
			t.Errorf("after a failed start %s holds %d entries (%v), want none", dir, len(left), err)
		}
	}
}
