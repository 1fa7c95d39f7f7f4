// Command conveyor is Conveyor's command line: it shows and repairs the
// queues of the durable drivers on a Redis (queues, stats, jobs, job,
// redrive, purge, cancel, delete, enqueue, pause, resume, workers, cron
// ls), serves the web dashboard (dash) and measures Conveyor on a Redis
// server (bench). Install it with
//
//	go install github.com/conveyorq/conveyor/cmd/conveyor@latest
//
// `conveyor help` lists the commands, `conveyor help <command>` says what
// one does and costs; docs/cli.md is the manual.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	// run gets the arguments after the command's name. It returns
	// errUsage (wrapped or not) for bad arguments, after printing why.
	run func(ctx context.Context, args []string, std stdio) error
}

// stdio are the standard streams a command reads and writes.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// errUsage marks an error in the arguments: exit status 2.
var errUsage = errors.New("usage")

var commands = []command{
	{name: "queues", summary: "list the queues: jobs per state, paused, processed and failed counts and rates", run: runQueues},
	{name: "stats", summary: "show one queue in depth", run: runStats},
	{name: "jobs", summary: "list a page of a queue's jobs in one state", run: runJobs},
	{name: "job", summary: "show one job by ID", run: runJob},
	{name: "enqueue", summary: "enqueue a job (payload from -payload or stdin)", run: runEnqueue},
	{name: "redrive", summary: "send discarded jobs back to their queue to run again", run: runRedrive},
	{name: "purge", summary: "delete a queue's ready, delayed or discarded jobs", run: runPurge},
	{name: "cancel", summary: "cancel a pending timer (a delayed job or a retry) by ID", run: runCancel},
	{name: "delete", summary: "delete a queue: its jobs in every state, its keys and its registry entry", run: runDelete},
	{name: "pause", summary: "stop every worker fetching from a queue", run: runPause},
	{name: "resume", summary: "let workers fetch from a paused queue again", run: runResume},
	{name: "limit", summary: "show or set a queue's fleet-wide concurrency limits, per kind or for the queue", run: runLimit},
	{name: "workers", summary: "list the live worker pools and what they run", run: runWorkers},
	{name: "cron", summary: "show cron series: last fire and the fire stored ahead (cron ls)", run: runCron},
	{name: "dash", summary: "serve the web dashboard over HTTP, behind credentials", run: runDash},
	{name: "bench", summary: "measure throughput, latency, delay lateness, memory and idle load on a Redis", run: func(ctx context.Context, args []string, std stdio) error {
		return runBench(ctx, args, std.out, std.err)
	}},
}

func main() {
	redis.SetLogger(quietLog{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
	stop()
	os.Exit(code)
}

// run dispatches args to a command and returns the exit status: 0 done, 1
// failed, 2 bad usage.
func run(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.out, std.err
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return 0
		}
		// "help bench" is "bench -h".
		name, rest = rest[0], []string{"-h"}
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(ctx, rest, std)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(stderr, "conveyor %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "conveyor: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "conveyor is the command line of Conveyor, background jobs on Redis.")
	fmt.Fprintln(w, "\nUsage:\n\n\tconveyor <command> [flags]\n\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "\t%s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "\thelp\t%s\n", "this text; `conveyor help <command>` for a command's flags")
	_ = tw.Flush()
	fmt.Fprintln(w, "\nEvery command but bench takes -redis (default from REDIS_URL), -prefix, -driver,\n-group and -json; exit status 0 is done, 1 failed, 2 a usage error.")
}
