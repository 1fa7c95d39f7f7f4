package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/cmd/conveyor/benchkit"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func noEnv(string) string { return "" }

func TestParseBenchDefaults(t *testing.T) {
	t.Parallel()
	o, err := parseBench(nil, &bytes.Buffer{}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.N != 100_000 || o.cfg.Payload != 100 || o.cfg.Concurrency != 50 || o.cfg.Batch != 100 {
		t.Errorf("cfg = %+v", o.cfg)
	}
	if !slices.Equal(o.drivers, []string{"list", "stream"}) {
		t.Errorf("drivers = %q, want list and stream", o.drivers)
	}
	if len(o.workloads) != len(benchkit.Workloads()) {
		t.Errorf("workloads = %q, want all %d", o.workloads, len(benchkit.Workloads()))
	}
	if o.redisURL != defaultRedisURL || o.json || o.prefix != "" {
		t.Errorf("redis %q json %v prefix %q", o.redisURL, o.json, o.prefix)
	}
	env := func(k string) string {
		if k == "REDIS_URL" {
			return "redis://example:6380/2"
		}
		return ""
	}
	if o, err := parseBench(nil, &bytes.Buffer{}, env); err != nil || o.redisURL != "redis://example:6380/2" {
		t.Errorf("REDIS_URL not the default: %v, %v", o, err)
	}
}

func TestParseBenchFlags(t *testing.T) {
	t.Parallel()
	o, err := parseBench([]string{"-n", "500", "-payload", "64", "-concurrency", "8", "-batch", "10",
		"-driver", "stream", "-workload", "memory, e2e,memory", "-redis", "redis://h:1/3", "-json", "-prefix", "p1",
		"-rate", "100", "-duration", "1s", "-timers", "50", "-window", "500ms", "-idle", "2s", "-pools", "7", "-split", "4", "-groups", "40"}, &bytes.Buffer{}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := benchkit.Config{N: 500, Payload: 64, Concurrency: 8, Batch: 10, Rate: 100, Duration: time.Second,
		Timers: 50, Window: 500 * time.Millisecond, Idle: 2 * time.Second, Pools: 7, Split: 4, Groups: 40, Timeout: 5 * time.Minute}
	if o.cfg != want {
		t.Errorf("cfg = %+v, want %+v", o.cfg, want)
	}
	if !slices.Equal(o.drivers, []string{"stream"}) || !slices.Equal(o.workloads, []string{"memory", "e2e"}) {
		t.Errorf("drivers %q workloads %q", o.drivers, o.workloads)
	}
	if o.redisURL != "redis://h:1/3" || !o.json || o.prefix != "p1" {
		t.Errorf("redis %q json %v prefix %q", o.redisURL, o.json, o.prefix)
	}
}

func TestParseBenchRejects(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-n", "0"},
		{"-n", "-3"},
		{"-payload", "7"},
		{"-concurrency", "0"},
		{"-batch", "0"},
		{"-window", "0s"},
		{"-idle", "0s"},
		{"-driver", "pubsub"},
		{"-workload", "e2e,nosuch"},
		{"-workload", ""},
		{"-redis", "http://x"},
		{"-nosuchflag"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		_, err := parseBench(args, &stderr, noEnv)
		if !errors.Is(err, errUsage) {
			t.Errorf("%q: err %v, want a usage error", args, err)
		}
		if !strings.Contains(stderr.String(), "Usage: conveyor bench") {
			t.Errorf("%q: no usage on stderr: %q", args, stderr.String())
		}
	}
}

// testRedisURL is the URL of the Redis the tests use (redistest's).
func testRedisURL(t *testing.T) string {
	t.Helper()
	redistest.Client(t) // fails the test, saying how to start one, when Redis is down
	if redistest.IsCluster() {
		t.Skip("conveyor bench takes one server's URL; it is tested on a single Redis")
	}
	if u := os.Getenv("CONVEYOR_TEST_REDIS_URL"); u != "" {
		return u
	}
	return redistest.DefaultURL
}

// TestBenchRunsEveryWorkload runs every workload with tiny sizes on each
// driver against the test Redis, through the JSON output, and checks that
// the run's keys are gone afterwards.
func TestBenchRunsEveryWorkload(t *testing.T) {
	t.Parallel()
	url := testRedisURL(t)
	rdb := redistest.Client(t)
	for _, driver := range benchkit.Drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t) // cleaned by the test too, should the run leave keys
			var stdout, stderr bytes.Buffer
			args := []string{"-driver", driver, "-workload", "all", "-n", "200", "-concurrency", "10", "-batch", "20",
				"-rate", "500", "-duration", "200ms", "-timers", "200", "-window", "200ms", "-idle", "1100ms", "-pools", "5", "-split", "3",
				"-timeout", "30s", "-redis", url, "-prefix", prefix, "-json"}
			if err := runBench(t.Context(), args, &stdout, &stderr); err != nil {
				t.Fatalf("bench: %v\nstderr: %s", err, stderr.String())
			}
			var rep benchkit.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("-json output does not parse: %v\n%s", err, stdout.String())
			}
			if rep.Config.N != 200 || rep.RedisVersion == "" || rep.GoVersion == "" {
				t.Errorf("report header: config n %d, redis %q, go %q", rep.Config.N, rep.RedisVersion, rep.GoVersion)
			}
			byName := map[string]benchkit.Result{}
			for _, r := range rep.Results {
				if r.System != driver {
					t.Errorf("result for system %q, want %q", r.System, driver)
				}
				byName[r.Workload] = r
			}
			for _, w := range benchkit.Workloads() {
				r, ok := byName[w.Name]
				if !ok {
					t.Errorf("no result for %s", w.Name)
					continue
				}
				if len(r.Metrics) == 0 {
					t.Errorf("%s: no figures", w.Name)
				}
			}
			positive := func(workload, figure string) float64 {
				t.Helper()
				m, ok := byName[workload].Metric(figure)
				if !ok || !(m.Value > 0) {
					t.Errorf("%s %s = %v (present %v), want > 0", workload, figure, m.Value, ok)
				}
				return m.Value
			}
			for _, w := range []string{"enqueue-loop", "enqueue-parallel", "enqueue-batch"} {
				positive(w, "enqueued")
			}
			positive("enqueue-loop", "baseline LPUSH")
			positive("enqueue-loop", "vs LPUSH")
			positive("e2e", "processed")
			positive("e2e-mixed", "processed")
			positive("e2e-groups", "processed, without groups")
			positive("e2e-groups", "processed, 200 groups")
			positive("e2e-split", "processed, 1 pool of 30")
			positive("e2e-split", "processed, 3 pools of 10")
			positive("e2e-split", "split vs one (3 pools)")
			positive("e2e-split", "processed, 3 pools of 10, prefetch 32")
			p50, p99, max := positive("latency", "p50"), positive("latency", "p99"), positive("latency", "max")
			if p50 > p99 || p99 > max {
				t.Errorf("latency p50 %v p99 %v max %v out of order", p50, p99, max)
			}
			if early, _ := byName["delay"].Metric("early"); early.Value != 0 {
				t.Errorf("%v timers ran early", early.Value)
			}
			positive("delay", "lateness p99")
			// The fleet's figures are the whole server's (other tests share
			// it): present and positive is what this run can check.
			for _, n := range []string{"1", "5"} {
				positive("fleet", "idle commands ("+n+" pools)")
				positive("fleet", "commands per job ("+n+" pools)")
				positive("fleet", "commands per delayed job ("+n+" pools)")
				if early, _ := byName["fleet"].Metric("early (" + n + " pools)"); early.Value != 0 {
					t.Errorf("fleet of %s: %v timers ran early", n, early.Value)
				}
			}
			positive("fleet", "commands per job, 5 pools vs 1")
			// used_memory is the whole server's: on the shared test Redis,
			// other tests (and the other driver's subtest) free and take
			// memory during the delta, which over 200 jobs can even be
			// negative. Only its presence is checked here; the figure is
			// meaningful on a quiet server with -n 100000.
			if m, ok := byName["memory"].Metric("per pending job"); !ok || math.IsNaN(m.Value) || math.IsInf(m.Value, 0) || m.Unit != "bytes" {
				t.Errorf("memory per pending job %v %q (present %v), want a number of bytes", m.Value, m.Unit, ok)
			}
			// An idle pool re-issues its blocking fetch and its promoter's
			// call at least once a second, so a window of 1.1 s sees some.
			if m, ok := byName["idle"].Metric("idle commands"); !ok || m.Value <= 0 || m.Value > 100 {
				t.Errorf("idle pool commands/s %v (present %v), want some and few", m.Value, ok)
			}
			if left := redistest.AllKeys(t, rdb, prefix); len(left) > 0 {
				t.Errorf("the run left %d keys under its prefix: %q", len(left), left[:min(5, len(left))])
			}
		})
	}
}

func TestBenchTableOutput(t *testing.T) {
	t.Parallel()
	url := testRedisURL(t)
	prefix := redistest.Prefix(t)
	var stdout, stderr bytes.Buffer
	err := runBench(context.Background(), []string{"-driver", "list", "-workload", "enqueue-batch", "-n", "200",
		"-redis", url, "-prefix", prefix}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"conveyor bench: go", "WORKLOAD", "enqueue-batch  list", "jobs/s", ">= 500,000"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
