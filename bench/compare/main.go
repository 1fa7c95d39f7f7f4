// Command compare runs the same workloads on asynq and on Conveyor's
// durable drivers, alternated in one run against one Redis, and prints each
// figure with Conveyor's ratio to asynq. It is a module of its own so that
// Conveyor never depends on asynq. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/conveyorq/conveyor/cmd/conveyor/benchkit"
)

// defaultWorkloads are the ones compared by default.
var defaultWorkloads = []string{"enqueue-loop", "enqueue-parallel", "e2e", "memory"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintf(os.Stderr, "compare: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	cfg       benchkit.Config
	workloads []string
	systems   []string
	rounds    int
	redisURL  string
	prefix    string
	json      bool
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var workloads, systems string
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	fs.IntVar(&o.cfg.N, "n", 100_000, "jobs per workload")
	fs.IntVar(&o.cfg.Payload, "payload", 100, "payload bytes per job (at least 8)")
	fs.IntVar(&o.cfg.Concurrency, "concurrency", 50, "pool concurrency and enqueue-parallel goroutines")
	fs.StringVar(&workloads, "workload", strings.Join(defaultWorkloads, ","), "comma-separated benchkit workloads")
	fs.StringVar(&systems, "systems", "asynq,list,stream", "systems to run, in the first round's order (asynq, list, stream)")
	fs.IntVar(&o.rounds, "rounds", 1, "rounds; each starts the order one system later, and the table shows medians")
	fs.StringVar(&o.redisURL, "redis", url, "Redis URL (default from REDIS_URL)")
	fs.StringVar(&o.prefix, "prefix", "", "key prefix of the run (default cvbench-<random>)")
	fs.BoolVar(&o.json, "json", false, "print every result as JSON instead of the table")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg, err := o.cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	o.cfg = cfg
	for w := range strings.SplitSeq(workloads, ",") {
		if _, ok := benchkit.Lookup(w); !ok {
			return nil, fmt.Errorf("unknown workload %q", w)
		}
		o.workloads = append(o.workloads, w)
	}
	for s := range strings.SplitSeq(systems, ",") {
		if s != "asynq" && !slices.Contains(benchkit.Drivers, s) {
			return nil, fmt.Errorf("unknown system %q (want asynq, list or stream)", s)
		}
		o.systems = append(o.systems, s)
	}
	if o.rounds < 1 {
		return nil, fmt.Errorf("-rounds %d: want at least 1", o.rounds)
	}
	return &o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	env, rep, done, err := benchkit.Start(ctx, o.redisURL, o.prefix, o.cfg, stderr)
	if err != nil {
		return err
	}
	defer done(&err)
	factories := map[string]benchkit.Factory{"asynq": asynqFactory(stderr)}
	for _, d := range benchkit.Drivers {
		factories[d] = benchkit.Conveyor(d)
	}
	for r := range o.rounds {
		for _, w := range o.workloads {
			for i := range o.systems {
				s := o.systems[(i+r)%len(o.systems)]
				res, err := benchkit.Run(ctx, env, w, factories[s])
				if err != nil {
					return err
				}
				fmt.Fprintf(stderr, "\rround %d: %s %s: %s\n", r+1, w, s, brief(res))
				rep.Results = append(rep.Results, res)
			}
		}
	}
	if o.json {
		return benchkit.WriteJSON(stdout, rep)
	}
	fmt.Fprintf(stdout, "compare: %s, GOMAXPROCS %d, Redis %s at %s; n %d, payload %d B, concurrency %d, %d round(s)\n\n",
		rep.GoVersion, rep.GOMAXPROCS, rep.RedisVersion, rep.RedisAddr, o.cfg.N, o.cfg.Payload, o.cfg.Concurrency, o.rounds)
	return writeComparison(stdout, rep.Results, o.workloads, o.systems)
}

// brief renders a result's figures on one line.
func brief(r benchkit.Result) string {
	var parts []string
	for _, m := range r.Metrics {
		parts = append(parts, fmt.Sprintf("%s %s %s", m.Name, benchkit.FormatValue(m.Value, m.Unit), m.Unit))
	}
	return strings.Join(parts, ", ")
}
