package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/cmd/conveyor/benchkit"
)

// benchOptions is a parsed `conveyor bench` command line.
type benchOptions struct {
	cfg       benchkit.Config
	drivers   []string
	workloads []string
	redisURL  string
	json      bool
	prefix    string
	// cpuprofile names the file a CPU profile of the whole run goes to.
	cpuprofile string
	// waitReplicas is the drivers' WaitReplicas.
	waitReplicas int
}

// defaultRedisURL is used when neither -redis nor REDIS_URL is set.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// parseBench parses the flags of `conveyor bench`; getenv supplies
// REDIS_URL. Errors in the flags are printed to stderr with the usage and
// wrap errUsage.
func parseBench(args []string, stderr io.Writer, getenv func(string) string) (*benchOptions, error) {
	fs := flag.NewFlagSet("conveyor bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o                benchOptions
		driver, workload string
		defURL           = defaultRedisURL
		names, cnames    []string
	)
	if u := getenv("REDIS_URL"); u != "" {
		defURL = u
	}
	for _, w := range benchkit.Workloads() {
		names = append(names, w.Name)
	}
	for _, w := range benchkit.ClusterWorkloads() {
		cnames = append(cnames, w.Name)
	}
	fs.IntVar(&o.cfg.N, "n", 100_000, "jobs per throughput and memory workload")
	fs.IntVar(&o.cfg.Payload, "payload", 100, "payload bytes per job (at least 8)")
	fs.IntVar(&o.cfg.Concurrency, "concurrency", 50, "pool concurrency; also the goroutines of enqueue-parallel and e2e-mixed")
	fs.IntVar(&o.cfg.Batch, "batch", 100, "EnqueueMany batch size of enqueue-batch")
	fs.IntVar(&o.cfg.Rate, "rate", 2000, "jobs per second of the latency workload")
	fs.DurationVar(&o.cfg.Duration, "duration", 5*time.Second, "how long the latency and fleet workloads enqueue")
	fs.IntVar(&o.cfg.Timers, "timers", 10_000, "timers of the delay workload")
	fs.DurationVar(&o.cfg.Window, "window", 2*time.Second, "span of the delay workload's due times (from 1s ahead)")
	fs.DurationVar(&o.cfg.Idle, "idle", 5*time.Second, "how long the idle and fleet workloads count commands")
	fs.IntVar(&o.cfg.Pools, "pools", 200, "pools of the fleet workload (each with its own Redis client; measured against 1 pool in the same run)")
	fs.IntVar(&o.cfg.Split, "split", 20, "pools of 10 workers of the e2e-split workload (each with its own Redis client; measured against 1 pool of split×10)")
	fs.IntVar(&o.cfg.Groups, "groups", 0, "FIFO groups of the e2e-groups workload (0: 1,000, or -n when smaller)")
	fs.IntVar(&o.cfg.Partitions, "partitions", 0, fmt.Sprintf("partitions of the sharded workload's split queue, 2 to %d (0: %d)", shard.MaxPartitions, benchkit.DefaultPartitions))
	fs.DurationVar(&o.cfg.Timeout, "timeout", 5*time.Minute, "longest wait for a workload's jobs to run")
	fs.StringVar(&driver, "driver", "all", "list, stream or all")
	fs.IntVar(&o.waitReplicas, "wait-replicas", 0, "the drivers' WaitReplicas: each enqueue waits until this many replicas have its jobs (needs a master with replicas)")
	fs.StringVar(&workload, "workload", "all", "comma-separated workloads, or all: "+strings.Join(names, ", ")+"; on a Redis Cluster: "+strings.Join(cnames, ", "))
	fs.StringVar(&o.redisURL, "redis", defURL, "Redis URL (default from REDIS_URL); a Redis Cluster as redis://host:port?addr=host:port&addr=host:port")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the run (all workloads) to this file")
	fs.StringVar(&o.prefix, "prefix", "", "key prefix of the run (default cvbench-<random>); its keys are deleted at the end")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "Usage: conveyor bench [flags]\n\nRuns workloads against Conveyor's durable drivers and prints a table\n(or JSON) of the figures, each with the target it is held to where there\nis one (docs/performance.md). Workloads:")
		for _, wl := range benchkit.Workloads() {
			fmt.Fprintf(w, "  %-17s %s\n", wl.Name, wl.Doc)
		}
		fmt.Fprintln(w, "\nOn a Redis Cluster (-redis redis://host:port?addr=host:port&addr=host:port,\ngo-redis's cluster URL), all runs these instead:")
		for _, wl := range benchkit.ClusterWorkloads() {
			fmt.Fprintf(w, "  %-17s %s\n", wl.Name, wl.Doc)
		}
		fmt.Fprintln(w, "\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	bad := func(format string, a ...any) (*benchOptions, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "conveyor bench: %v\n", err)
		fs.Usage()
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	cfg, err := o.cfg.WithDefaults()
	if err != nil {
		return bad("%v", err)
	}
	// WithDefaults would turn an explicit 0 into the default; a 0 on the
	// command line is a mistake.
	for name, v := range map[string]int{"n": o.cfg.N, "payload": o.cfg.Payload, "concurrency": o.cfg.Concurrency, "batch": o.cfg.Batch, "rate": o.cfg.Rate, "timers": o.cfg.Timers} {
		if v == 0 {
			return bad("-%s 0: want a positive number", name)
		}
	}
	for name, v := range map[string]time.Duration{"duration": o.cfg.Duration, "window": o.cfg.Window, "idle": o.cfg.Idle, "timeout": o.cfg.Timeout} {
		if v == 0 {
			return bad("-%s 0: want a positive duration", name)
		}
	}
	o.cfg = cfg
	switch driver {
	case "all":
		o.drivers = benchkit.Drivers
	case "list", "stream":
		o.drivers = []string{driver}
	default:
		return bad("-driver %q: want list, stream or all", driver)
	}
	// A cluster runs the cluster workloads only: the others read one
	// server's INFO.
	cluster := benchkit.ClusterURL(o.redisURL)
	fits := names
	if cluster {
		fits = cnames
	}
	if workload == "all" {
		o.workloads = fits
	} else {
		for w := range strings.SplitSeq(workload, ",") {
			w = strings.TrimSpace(w)
			if _, ok := benchkit.Lookup(w); !ok {
				return bad("-workload: unknown workload %q (want %s, or all)", w, strings.Join(slices.Concat(names, cnames), ", "))
			}
			switch {
			case !slices.Contains(fits, w) && cluster:
				return bad("-workload %s measures one Redis server; -redis names a Redis Cluster (want %s)", w, strings.Join(cnames, ", "))
			case !slices.Contains(fits, w):
				return bad("-workload %s needs a Redis Cluster: give -redis as redis://host:port?addr=host:port&addr=host:port", w)
			}
			if !slices.Contains(o.workloads, w) {
				o.workloads = append(o.workloads, w)
			}
		}
	}
	parse := func(u string) error { _, err := redis.ParseURL(u); return err }
	if cluster {
		parse = func(u string) error { _, err := redis.ParseClusterURL(u); return err }
	}
	if err := parse(o.redisURL); err != nil {
		return bad("-redis %q: %v", o.redisURL, err)
	}
	return &o, nil
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBench(args, stderr, os.Getenv)
	if err != nil {
		return err
	}
	return bench(ctx, o, stdout, stderr)
}

// bench runs the workloads of o, each on every driver of o, and prints
// the report. A failed workload does not stop the others; its error is
// returned at the end, after the figures that were measured.
func bench(ctx context.Context, o *benchOptions, stdout, stderr io.Writer) (err error) {
	// Progress is redrawn in place on a terminal, plain lines elsewhere.
	progress := progressWriter(stderr)
	env, rep, done, err := benchkit.Start(ctx, o.redisURL, o.prefix, o.cfg, progress)
	if err != nil {
		return err
	}
	defer done(&err)
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return fmt.Errorf("bench: cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("bench: cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	var errs []error
	for _, w := range o.workloads {
		for _, d := range o.drivers {
			if ctx.Err() != nil {
				errs = append(errs, ctx.Err())
				break
			}
			res, err := benchkit.Run(ctx, env, w, benchkit.ConveyorWaiting(d, o.waitReplicas))
			if err != nil {
				fmt.Fprintf(progress, "\r%v\n", err)
				errs = append(errs, err)
				continue
			}
			rep.Results = append(rep.Results, res)
		}
	}
	if o.json {
		err = benchkit.WriteJSON(stdout, rep)
	} else {
		fmt.Fprintf(stdout, "conveyor bench: %s, GOMAXPROCS %d, Redis %s at %s; n %d, payload %d B, concurrency %d, batch %d\n\n",
			rep.GoVersion, rep.GOMAXPROCS, rep.RedisVersion, rep.RedisAddr, o.cfg.N, o.cfg.Payload, o.cfg.Concurrency, o.cfg.Batch)
		err = benchkit.WriteTable(stdout, rep.Results)
	}
	return errors.Join(append(errs, err)...)
}
