package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisha"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestParseMasterCounts(t *testing.T) {
	t.Parallel()
	info := "# Commandstats\r\n" +
		"cmdstat_lpush:calls=10,usec=40,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=3,usec=1000,usec_per_call=333.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_exec:calls=1,usec=500,usec_per_call=500.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setname:calls=2,usec=2,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_lmove:calls=30,usec=300,usec_per_call=10.00,rejected_calls=1,failed_calls=0\r\n" +
		"\r\n# CPU\r\n" +
		"used_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n" +
		"used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n" +
		"used_cpu_sys_main_thread:7.000000\r\nused_cpu_user_main_thread:7.000000\r\n"
	c, err := parseMasterCounts(info)
	if err != nil {
		t.Fatal(err)
	}
	// evalsha and exec are left out: their commands (lmove here) count
	// in their own lines.
	if c.usec != 342 {
		t.Errorf("usec = %d, want 342 (lpush, client|setname, lmove)", c.usec)
	}
	if c.calls != 46 {
		t.Errorf("calls = %d, want 46 (every line's)", c.calls)
	}
	if c.cpu != 3.75 {
		t.Errorf("cpu = %v, want 3.75 (sys + user, not the children's or main thread's)", c.cpu)
	}
	if _, err := parseMasterCounts("cmdstat_get:calls=1,usec=x\r\n"); err == nil {
		t.Error("a bad usec gave no error")
	}
	if _, err := parseMasterCounts("cmdstat_get:calls=1\r\n"); err == nil {
		t.Error("a line without usec gave no error")
	}
	if _, err := parseMasterCounts("cmdstat_get:usec=1\r\n"); err == nil {
		t.Error("a line without calls gave no error")
	}
}

func TestShardedSharesAndGoals(t *testing.T) {
	t.Parallel()
	r := shardRun{masters: map[string]masterCounts{
		"b:2": {usec: 300, cpu: 1},
		"a:1": {usec: 300, cpu: 1},
		"c:3": {usec: 400, cpu: 1},
	}}
	cfg, _ := Config{}.WithDefaults()
	ms := goals("sharded", "list", cfg, append(r.shares("6 partitions"),
		Metric{Name: "6 partitions vs 1", Value: 0.79, Unit: "ratio"}))
	value := func(name string) Metric {
		t.Helper()
		for _, m := range ms {
			if m.Name == name {
				return m
			}
		}
		t.Fatalf("no figure %q among %d", name, len(ms))
		return Metric{}
	}
	if m := value("share of the masters' commandstats usec, c:3 (6 partitions)"); m.Value != 0.4 {
		t.Errorf("c:3's usec share = %v, want 0.4", m.Value)
	}
	if m := value("share of the masters' CPU seconds, a:1 (6 partitions)"); math.Abs(m.Value-1.0/3) > 1e-12 {
		t.Errorf("a:1's CPU share = %v, want 1/3", m.Value)
	}
	// c:3 holds 0.4 against an even 1/3: 20% over.
	if m := value("largest |share - 1/3| / (1/3), commandstats usec (6 partitions)"); math.Abs(m.Value-0.2) > 1e-12 || m.Met == nil || *m.Met || m.Goal != "<= 0.100" {
		t.Errorf("usec deviation %v goal %q met %v, want 0.2, <= 0.100, missed", m.Value, m.Goal, m.Met)
	}
	if m := value("largest |share - 1/3| / (1/3), CPU seconds (6 partitions)"); m.Value > 1e-12 || m.Met == nil || !*m.Met {
		t.Errorf("CPU deviation %v met %v, want 0, met", m.Value, m.Met)
	}
	if m := value("6 partitions vs 1"); m.Met == nil || *m.Met || m.Goal != ">= 0.800" {
		t.Errorf("ratio goal %q met %v, want >= 0.800 missed", m.Goal, m.Met)
	}
	if i := slices.IndexFunc(ms, func(m Metric) bool { return strings.Contains(m.Name, "a:1") }); i != 0 {
		t.Errorf("the first master's figure is at %d, want the masters in address order", i)
	}
}

func TestClusterURL(t *testing.T) {
	t.Parallel()
	o, err := URLOptions("redis://u:p@10.0.0.1:7101?addr=10.0.0.2:7102&addr=10.0.0.3:7103", 100)
	if err != nil {
		t.Fatal(err)
	}
	if !o.IsClusterMode || !slices.Equal(o.Addrs, []string{"10.0.0.1:7101", "10.0.0.2:7102", "10.0.0.3:7103"}) ||
		o.Username != "u" || o.Password != "p" || o.PoolSize != 116 {
		t.Errorf("cluster URL gave %+v", o)
	}
	o, err = URLOptions("redis://10.0.0.1:6379/2", 10)
	if err != nil {
		t.Fatal(err)
	}
	if o.IsClusterMode || !slices.Equal(o.Addrs, []string{"10.0.0.1:6379"}) || o.DB != 2 {
		t.Errorf("one server's URL gave %+v", o)
	}
	if _, err := URLOptions("redis://10.0.0.1:7101?addr=nohostport", 10); err == nil {
		t.Error("a bad addr parameter gave no error")
	}
	if ClusterURL("redis://10.0.0.1:6379/0") || !ClusterURL("redis://h:1?addr=h:1") {
		t.Error("ClusterURL tells a cluster URL by its addr parameters")
	}
}

// clusterOptions returns the options of the Redis Cluster that
// CONVEYOR_TEST_REDIS_CLUSTER names, as the other tests' (shared: other
// tests load it too), or else of one this test starts (its own).
func clusterOptions(t *testing.T) (_ *redis.UniversalOptions, own bool) {
	t.Helper()
	if redistest.IsCluster() {
		// Not redistest.Client: the package's shared cluster client is
		// never closed, and goleak finds its nodes' goroutines.
		opts, _, err := redistest.Options()
		if err != nil {
			t.Fatal(err)
		}
		o := *opts
		o.PoolSize = 64
		return &o, false
	}
	c := redisha.ClusterT(t, nil)
	return &redis.UniversalOptions{Addrs: c.Seeds(), IsClusterMode: true, PoolSize: 64}, true
}

// TestShardedWorkload runs the sharded workload with tiny sizes on each
// driver against a Redis Cluster and checks its figures and that it
// leaves no key behind; and that a run refuses a prefix another holds a
// key under on any master.
func TestShardedWorkload(t *testing.T) {
	t.Parallel()
	opts, own := clusterOptions(t)
	ctx := t.Context()
	e, err := NewEnv(ctx, opts, "cvt-sharded-"+RandomPrefix(), Config{N: 300, Concurrency: 10, Timeout: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	cc := e.Redis.(*redis.ClusterClient)
	var count atomic.Int64 // ForEachMaster calls in parallel
	if err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { count.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	masters := int(count.Load())
	refusesUsedPrefix(t, opts, cc)
	for _, driver := range Drivers {
		res, err := Run(ctx, e, "sharded", Conveyor(driver))
		if err != nil {
			t.Fatalf("%s: %v", driver, err)
		}
		figure := func(name string) Metric {
			t.Helper()
			m, ok := res.Metric(name)
			if !ok {
				t.Fatalf("%s: no figure %q", driver, name)
			}
			return m
		}
		for _, name := range []string{"processed, 1 partition", "processed, 6 partitions", "6 partitions vs 1",
			"enqueued, 1 partition", "enqueued, 6 partitions", "commands per job, 6 partitions", "Redis CPU per job, 6 partitions"} {
			if m := figure(name); !(m.Value > 0) {
				t.Errorf("%s: %s = %v, want > 0", driver, name, m.Value)
			}
		}
		if m := figure("6 partitions vs 1"); m.Goal != ">= 0.800" {
			t.Errorf("%s: ratio goal %q, want >= 0.800", driver, m.Goal)
		}
		var usec, cpu []float64
		for _, m := range res.Metrics {
			switch {
			case strings.HasPrefix(m.Name, "share of the masters' commandstats usec, "):
				usec = append(usec, m.Value)
			case strings.HasPrefix(m.Name, "share of the masters' CPU seconds, "):
				cpu = append(cpu, m.Value)
			}
		}
		if len(usec) != masters || len(cpu) != masters {
			t.Fatalf("%s: %d usec and %d CPU shares, want one per master (%d)", driver, len(usec), len(cpu), masters)
		}
		for kind, shares := range map[string][]float64{"usec": usec, "CPU": cpu} {
			var sum float64
			for _, s := range shares {
				sum += s
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("%s: %s shares %v add up to %v, want 1", driver, kind, shares, sum)
			}
		}
		dev := figure(fmt.Sprintf("largest |share - 1/%d| / (1/%d), commandstats usec (6 partitions)", masters, masters))
		if dev.Goal != "<= 0.100" {
			t.Errorf("%s: deviation goal %q, want <= 0.100", driver, dev.Goal)
		}
		// On a cluster of its own, the split queue's work is on every
		// master: the whole queue's on one would be a deviation of 2. A
		// shared cluster carries the other tests' load as well.
		if own && !(dev.Value < 1) {
			t.Errorf("%s: usec shares %v deviate by %v; want the partitions' work on every master", driver, usec, dev.Value)
		}
		if left := redistest.AllKeys(t, e.Redis, e.Prefix); len(left) > 0 {
			t.Errorf("%s: the workload left %d keys: %q", driver, len(left), left[:min(5, len(left))])
		}
	}
}

// refusesUsedPrefix checks that NewEnv refuses a prefix with a key on any
// one master of the cluster, whichever: the run would delete it.
func refusesUsedPrefix(t *testing.T, opts *redis.UniversalOptions, cc *redis.ClusterClient) {
	t.Helper()
	ctx := t.Context()
	prefix := "cvt-taken-" + RandomPrefix()
	byMaster := map[string]string{} // a key under prefix that each master holds
	for i := 0; i < 1000; i++ {
		k := prefix + ":k" + strconv.Itoa(i)
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byMaster[m.Options().Addr]; !ok {
			byMaster[m.Options().Addr] = k
		}
	}
	for addr, k := range byMaster {
		if err := cc.Set(ctx, k, "someone else's", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		e, err := NewEnv(ctx, opts, prefix, Config{}, nil)
		if err == nil {
			_ = e.Redis.Close()
			t.Errorf("NewEnv took prefix %s with a key on %s", prefix, addr)
		}
		if err := cc.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShardedRefusesOneServer: on one Redis server the workload fails,
// saying it needs a cluster and how to name one.
func TestShardedRefusesOneServer(t *testing.T) {
	t.Parallel()
	if redistest.IsCluster() {
		t.Skip("needs one Redis server; TestShardedWorkload runs on the cluster")
	}
	redistest.Client(t)
	opts, _, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	e, err := NewEnv(t.Context(), opts, prefix, Config{N: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Redis.Close() }()
	_, err = Run(t.Context(), e, "sharded", Conveyor("list"))
	if !errors.Is(err, errNotCluster) || !strings.Contains(err.Error(), "?addr=") {
		t.Errorf("err = %v, want errNotCluster saying how to give a cluster", err)
	}
	if left := redistest.AllKeys(t, redistest.Client(t), prefix); len(left) > 0 {
		t.Errorf("the refused run wrote %q", left)
	}
}
