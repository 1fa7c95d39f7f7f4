package benchkit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/worker"
)

// The fleet workload runs -pools pools of concurrency 1 on one queue, each
// with its own Redis client, and the same with one pool, in the same run,
// and measures on the server (INFO commandstats, where the commands a
// script sends count too, and INFO cpu): the commands per second of the
// idle fleet (over -idle, at least a worker registry interval), then the
// commands and Redis CPU per job while one job is
// enqueued every fleetEvery for -duration, plain and delayed by fleetDelay,
// and the delayed jobs' lateness (handler start minus due time). The
// figures are the whole server's: run it on a Redis nothing else uses.
const (
	fleetEvery = 20 * time.Millisecond
	fleetDelay = 300 * time.Millisecond
	// fleetSettle lets the pools start, their first waits begin and the
	// keeper election settle (a standby looks twice in its first
	// elect.DefaultHeirTTL), so that idle is the fleet's steady state.
	fleetSettle = 5 * time.Second
)

func fleet(ctx context.Context, e *Env, f Factory, _ string) (_ []Metric, err error) {
	var out []Metric
	sizes := []int{1}
	if e.Cfg.Pools > 1 {
		sizes = append(sizes, e.Cfg.Pools)
	}
	per := map[int]map[string]float64{}
	for _, n := range sizes {
		ms, err := fleetOf(ctx, e, f, n)
		if err != nil {
			return nil, err
		}
		per[n] = map[string]float64{}
		for _, m := range ms {
			per[n][m.Name] = m.Value
			m.Name = fmt.Sprintf("%s (%d pools)", m.Name, n)
			out = append(out, m)
		}
	}
	if n := e.Cfg.Pools; n > 1 {
		for _, name := range []string{"commands per job", "Redis CPU per job", "commands per delayed job", "Redis CPU per delayed job"} {
			if base := per[1][name]; base > 0 {
				out = append(out, Metric{Name: fmt.Sprintf("%s, %d pools vs 1", name, n), Value: per[n][name] / base, Unit: "ratio"})
			}
		}
	}
	return out, nil
}

// fleetOf measures a fleet of n pools.
func fleetOf(ctx context.Context, e *Env, f Factory, n int) (_ []Metric, err error) {
	ns := e.Namespace("fleet"+strconv.Itoa(n), f.Name)
	producer, err := f.New(e.Redis, ns)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = errors.Join(err, producer.Close(cctx))
	}()

	// Plain jobs carry the stamp 1; a delayed job's stamp is its due time.
	var (
		handled  tally
		lateness samples
	)
	h := func(p []byte) {
		if stamp := getStamp(p); stamp > 1 {
			lateness.add(e.sinceStamp(time.Now(), stamp))
		}
		handled.add()
	}

	opts := *e.Options
	opts.PoolSize = 4
	var pools []*serving
	var clients []redis.UniversalClient
	defer func() {
		for _, s := range pools {
			err = errors.Join(err, s.stop())
		}
		for _, c := range clients {
			err = errors.Join(err, c.Close())
		}
	}()
	for range n {
		c := redis.NewUniversalClient(&opts)
		clients = append(clients, c)
		t, err := f.New(c, ns)
		if err != nil {
			return nil, err
		}
		pools = append(pools, serve(ctx, t, 1, h))
	}
	sleep := func(d time.Duration) error { return pools[0].sleep(ctx, d) }
	if err := sleep(fleetSettle); err != nil {
		return nil, err
	}

	// Idle.
	c0, _, err := serverCounts(ctx, e.Redis)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	// At least one worker registry interval, so that every pool's
	// registry beat is counted.
	if err := sleep(max(e.Cfg.Idle, worker.DefaultRegistryInterval)); err != nil {
		return nil, err
	}
	c1, cpu1, err := serverCounts(ctx, e.Redis)
	if err != nil {
		return nil, err
	}
	out := []Metric{{Name: "idle commands", Value: float64(c1-c0) / time.Since(t0).Seconds(), Unit: "cmd/s"}}

	// One job every fleetEvery, plain, then delayed.
	jobs := max(1, int(e.Cfg.Duration/fleetEvery))
	for phase, delayed := range []bool{false, true} {
		done := handled.reached(int64((phase + 1) * jobs))
		start, startCPU := c1, cpu1
		tick := time.NewTicker(fleetEvery)
		for i := range jobs {
			var err error
			if delayed {
				at := time.Now().Add(fleetDelay)
				err = producer.EnqueueAt(ctx, [][]byte{e.payload(e.stamp(at))}, []time.Time{at})
			} else {
				err = producer.Enqueue(ctx, e.payload(1))
			}
			if err != nil {
				tick.Stop()
				return nil, err
			}
			if i < jobs-1 {
				select {
				case <-tick.C:
				case <-ctx.Done():
					tick.Stop()
					return nil, ctx.Err()
				}
			}
		}
		tick.Stop()
		if err := pools[0].wait(ctx, done, fleetDelay+e.Cfg.Timeout, "every job to run"); err != nil {
			return nil, err
		}
		if c1, cpu1, err = serverCounts(ctx, e.Redis); err != nil {
			return nil, err
		}
		name := "job"
		if delayed {
			name = "delayed job"
		}
		out = append(out,
			Metric{Name: "commands per " + name, Value: float64(c1-start) / float64(jobs), Unit: "cmd"},
			Metric{Name: "Redis CPU per " + name, Value: (cpu1 - startCPU) / float64(jobs) * 1e6, Unit: "µs"})
		if delayed {
			lateness.mu.Lock()
			d := Summarise(lateness.d)
			lateness.mu.Unlock()
			out = append(out,
				Metric{Name: "lateness p99", Value: ms(d.P99), Unit: "ms"},
				Metric{Name: "early", Value: float64(d.Negative), Unit: "timers"})
		}
	}
	return out, nil
}

// serverCounts returns the server's commands so far (the sum of
// INFO commandstats calls, script-internal commands included) and its CPU
// seconds (used_cpu_sys + used_cpu_user).
func serverCounts(ctx context.Context, rdb redis.UniversalClient) (int64, float64, error) {
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO: %w", err)
	}
	var calls int64
	var cpu float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			_, rest, _ := strings.Cut(line, "calls=")
			v, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("INFO commandstats line %q", line)
			}
			calls += n
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			_, v, _ := strings.Cut(line, ":")
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("INFO cpu line %q", line)
			}
			cpu += x
		}
	}
	return calls, cpu, nil
}

// fleetGoal attaches the fleet targets to m: at 200 pools, idle at most 50
// commands/s for the fleet, commands and Redis CPU per job at most 1.5
// times one pool's, lateness p99 at most 5 ms (3 ms with one pool), and
// never early.
func fleetGoal(cfg Config, m Metric) Metric {
	big := fmt.Sprintf("(%d pools)", cfg.Pools)
	switch {
	case cfg.Pools != 200:
		return m
	case m.Name == "idle commands "+big:
		return m.withGoal("<=", 50)
	case strings.HasSuffix(m.Name, ", 200 pools vs 1"):
		return m.withGoal("<=", 1.5)
	case m.Name == "lateness p99 "+big:
		return m.withGoal("<=", 5)
	case m.Name == "lateness p99 (1 pools)":
		return m.withGoal("<=", 3)
	case strings.HasPrefix(m.Name, "early "):
		return m.withGoal("<=", 0)
	}
	return m
}
