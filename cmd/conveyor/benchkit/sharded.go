package benchkit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/shard"
)

// The sharded workload runs on a Redis Cluster. Through a shard.Driver
// over the system's driver it enqueues -n jobs (batches of 1,000) and
// drains them with a pool of -concurrency, once with the queue whole (1
// partition, so on one master) and once split into Config.Partitions
// partitions, whose slots spread over the masters; it reports both rates,
// their ratio, and the masters' commands and CPU per job. Over the split
// run, enqueue and drain, it reads each master's INFO before and after and
// reports each master's share of the masters' commandstats time and of
// their CPU seconds, and the largest deviation of a share from 1/masters,
// as a fraction of 1/masters.
//
// The commandstats time of a master is the sum of usec over its
// cmdstat_* lines except those of the commands that run other commands
// (scriptRunners): a script's or a transaction's time includes that of the
// commands it ran, which have lines of their own, so each command is
// counted once and the Lua interpreter's own time is left out (the CPU
// share has it). The figures are the masters' whole: use a cluster nothing
// else uses.

// scriptRunners are the commands whose commandstats time includes that of
// the commands they ran.
var scriptRunners = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "exec"}

// errNotCluster is the sharded workload's error on a Redis that is not a
// Cluster.
var errNotCluster = errors.New("needs a Redis Cluster: give -redis as redis://host:port?addr=host:port&addr=host:port (go-redis's cluster URL; more seeds in addr parameters)")

func sharded(ctx context.Context, e *Env, f Factory, label string) (_ []Metric, err error) {
	cc, ok := e.Redis.(*redis.ClusterClient)
	if !ok {
		info, err := e.Redis.Info(ctx, "cluster").Result()
		if err == nil && strings.Contains(info, "cluster_enabled:1") {
			return nil, fmt.Errorf("-redis names one node of a Redis Cluster, not the cluster: the workload %w", errNotCluster)
		}
		return nil, fmt.Errorf("the workload %w", errNotCluster)
	}
	n := e.Cfg.partitions()
	one, err := shardedRun(ctx, e, cc, f, label+", 1 partition", 1)
	if err != nil {
		return nil, err
	}
	many, err := shardedRun(ctx, e, cc, f, fmt.Sprintf("%s, %d partitions", label, n), n)
	if err != nil {
		return nil, err
	}
	a, b := "1 partition", fmt.Sprintf("%d partitions", n)
	out := []Metric{
		{Name: "processed, " + a, Value: one.processed, Unit: "jobs/s"},
		{Name: "processed, " + b, Value: many.processed, Unit: "jobs/s"},
		{Name: b + " vs 1", Value: many.processed / one.processed, Unit: "ratio"},
		{Name: "enqueued, " + a, Value: one.enqueued, Unit: "jobs/s"},
		{Name: "enqueued, " + b, Value: many.enqueued, Unit: "jobs/s"},
		{Name: "commands per job, " + a, Value: one.commandsPerJob(e.Cfg.N), Unit: "cmd"},
		{Name: "commands per job, " + b, Value: many.commandsPerJob(e.Cfg.N), Unit: "cmd"},
		{Name: "Redis CPU per job, " + a, Value: one.cpuPerJob(e.Cfg.N), Unit: "µs"},
		{Name: "Redis CPU per job, " + b, Value: many.cpuPerJob(e.Cfg.N), Unit: "µs"},
	}
	return append(out, many.shares(b)...), nil
}

// partitions returns the sharded workload's partition count.
func (c Config) partitions() int {
	if c.Partitions == 0 {
		return DefaultPartitions
	}
	return c.Partitions
}

// shardRun is what one run of the sharded workload measured.
type shardRun struct {
	processed, enqueued float64 // jobs/s
	// masters holds, by address, what each master spent over the run.
	masters map[string]masterCounts
}

// masterCounts is what a master spent: commands (the sum of INFO
// commandstats calls, those scripts sent included, as the other workloads
// count them), commandstats time (usec, each command once: see
// scriptRunners) and CPU seconds (used_cpu_sys + used_cpu_user).
type masterCounts struct {
	calls, usec int64
	cpu         float64
}

// commandsPerJob returns the masters' commands per job.
func (r shardRun) commandsPerJob(n int) float64 {
	var calls int64
	for _, c := range r.masters {
		calls += c.calls
	}
	return float64(calls) / float64(n)
}

// cpuPerJob returns the masters' CPU time per job, in µs.
func (r shardRun) cpuPerJob(n int) float64 {
	var cpu float64
	for _, c := range r.masters {
		cpu += c.cpu
	}
	return cpu * 1e6 / float64(n)
}

// shares returns each master's share of the commandstats time and of the
// CPU seconds, and each kind's largest deviation from 1/masters.
func (r shardRun) shares(run string) []Metric {
	addrs := slices.Sorted(maps.Keys(r.masters))
	var usec int64
	var cpu float64
	for _, c := range r.masters {
		usec += c.usec
		cpu += c.cpu
	}
	even := 1 / float64(len(addrs))
	var out []Metric
	var devUsec, devCPU float64
	for _, a := range addrs {
		su := float64(r.masters[a].usec) / float64(usec)
		sc := r.masters[a].cpu / cpu
		devUsec = max(devUsec, math.Abs(su-even)/even)
		devCPU = max(devCPU, math.Abs(sc-even)/even)
		out = append(out,
			Metric{Name: fmt.Sprintf("share of the masters' commandstats usec, %s (%s)", a, run), Value: su, Unit: "ratio"},
			Metric{Name: fmt.Sprintf("share of the masters' CPU seconds, %s (%s)", a, run), Value: sc, Unit: "ratio"})
	}
	m := len(addrs)
	return append(out,
		Metric{Name: fmt.Sprintf("largest |share - 1/%d| / (1/%d), commandstats usec (%s)", m, m, run), Value: devUsec, Unit: "ratio"},
		Metric{Name: fmt.Sprintf("largest |share - 1/%d| / (1/%d), CPU seconds (%s)", m, m, run), Value: devCPU, Unit: "ratio"})
}

// shardedGoal attaches the sharded workload's targets to m: the split
// queue at least 0.8 of the whole one's rate, and every master's share of
// its work within 10% of an even share.
func shardedGoal(m Metric) Metric {
	switch {
	case strings.HasSuffix(m.Name, " partitions vs 1"):
		return m.withGoal(">=", 0.8)
	case strings.HasPrefix(m.Name, "largest |share"):
		return m.withGoal("<=", 0.1)
	}
	return m
}

// shardedRun enqueues -n jobs on a queue of the given number of partitions
// and drains them, in a namespace of its own that it deletes afterwards,
// and reads the masters' counts before and after.
func shardedRun(ctx context.Context, e *Env, cc *redis.ClusterClient, f Factory, label string, partitions int) (_ shardRun, err error) {
	t, closeT, err := open(e, e.Redis, f, "sharded"+strconv.Itoa(partitions))
	if err != nil {
		return shardRun{}, err
	}
	defer func() { err = errors.Join(err, closeT()) }()
	pt, d, err := partitioned(t, partitions)
	if err != nil {
		return shardRun{}, err
	}
	before, err := mastersCounts(ctx, cc)
	if err != nil {
		return shardRun{}, err
	}
	t0 := time.Now()
	if err := preload(ctx, e, pt, e.Cfg.N, label); err != nil {
		return shardRun{}, err
	}
	enqueued := rate(e.Cfg.N, time.Since(t0))
	if err := checkSizes(ctx, d, "after the enqueue", broker.QueueSizes{Ready: int64(e.Cfg.N)}); err != nil {
		return shardRun{}, err
	}
	processed, err := drain(ctx, e, pt, label)
	if err != nil {
		return shardRun{}, err
	}
	after, err := mastersCounts(ctx, cc)
	if err != nil {
		return shardRun{}, err
	}
	if err := checkSizes(ctx, d, "after the drain", broker.QueueSizes{Processed: int64(e.Cfg.N)}); err != nil {
		return shardRun{}, err
	}
	r := shardRun{processed: processed, enqueued: enqueued, masters: map[string]masterCounts{}}
	for a, c1 := range after {
		c0, ok := before[a]
		if !ok || len(before) != len(after) {
			return shardRun{}, fmt.Errorf("benchkit: the cluster's masters changed during the run (%v before, %v after)",
				slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
		}
		r.masters[a] = masterCounts{calls: c1.calls - c0.calls, usec: c1.usec - c0.usec, cpu: c1.cpu - c0.cpu}
	}
	return r, nil
}

// partitioned returns t, a Conveyor target, with its queue split into n
// partitions (a shard.Driver over its driver), and that driver.
func partitioned(t Target, n int) (*conveyorTarget, *shard.Driver, error) {
	ct, ok := t.(*conveyorTarget)
	if !ok {
		return nil, nil, errors.New("benchkit: the system has no partitioned queues")
	}
	d, err := shard.New(ct.d, shard.Config{Partitions: n})
	if err != nil {
		return nil, nil, fmt.Errorf("benchkit: shard driver: %w", err)
	}
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: benchQueue})
	if err != nil {
		return nil, nil, fmt.Errorf("benchkit: client: %w", err)
	}
	return &conveyorTarget{rdb: ct.rdb, ns: ct.ns, d: d, c: c}, d, nil
}

// checkSizes fails unless the bench queue's ready, in-flight, delayed and
// discarded jobs and its processed count are want's: no job lost or run
// twice by the partitions.
func checkSizes(ctx context.Context, d *shard.Driver, when string, want broker.QueueSizes) error {
	ss, err := d.QueueSizes(ctx, benchQueue)
	if err != nil {
		return fmt.Errorf("benchkit: queue sizes %s: %w", when, err)
	}
	s := ss[0]
	if s.Ready != want.Ready || s.InFlight != 0 || s.Delayed != 0 || s.Discarded != 0 || s.Processed != want.Processed {
		return fmt.Errorf("benchkit: %s the queue holds %d ready, %d in flight, %d delayed, %d discarded and has %d processed; want %d ready, %d processed and no other",
			when, s.Ready, s.InFlight, s.Delayed, s.Discarded, s.Processed, want.Ready, want.Processed)
	}
	return nil
}

// mastersCounts reads the counts of every master of the cluster, by
// address.
func mastersCounts(ctx context.Context, cc *redis.ClusterClient) (map[string]masterCounts, error) {
	var mu sync.Mutex
	out := map[string]masterCounts{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		info, err := n.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return fmt.Errorf("INFO on %s: %w", n.Options().Addr, err)
		}
		c, err := parseMasterCounts(info)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Options().Addr, err)
		}
		mu.Lock()
		out[n.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("benchkit: %w", err)
	}
	return out, nil
}

// parseMasterCounts reads an INFO commandstats and cpu reply: the calls of
// every command, the usec of every command but scriptRunners, and
// used_cpu_sys + used_cpu_user.
func parseMasterCounts(info string) (masterCounts, error) {
	var c masterCounts
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			name, stats, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			calls, usec := int64(-1), int64(-1)
			for kv := range strings.SplitSeq(stats, ",") {
				k, v, _ := strings.Cut(kv, "=")
				if k != "calls" && k != "usec" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return masterCounts{}, fmt.Errorf("INFO commandstats line %q", line)
				}
				if k == "calls" {
					calls = n
				} else {
					usec = n
				}
			}
			if calls < 0 || usec < 0 {
				return masterCounts{}, fmt.Errorf("INFO commandstats line %q lacks calls or usec", line)
			}
			c.calls += calls
			if !slices.Contains(scriptRunners, name) {
				c.usec += usec
			}
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			_, v, _ := strings.Cut(line, ":")
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return masterCounts{}, fmt.Errorf("INFO cpu line %q", line)
			}
			c.cpu += x
		}
	}
	return c, nil
}
