// Command conveyor is Conveyor's command line. For now it has one command,
// bench, which measures Conveyor on a Redis server; see `conveyor help`.
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
)

// command is one subcommand. Later ones (inspect, enqueue, redrive) are
// added to commands.
type command struct {
	name    string
	summary string
	// run gets the arguments after the command's name. It returns
	// errUsage (wrapped or not) for bad arguments, after printing why.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// errUsage marks an error in the arguments: exit status 2.
var errUsage = errors.New("usage")

var commands = []command{
	{name: "bench", summary: "measure throughput, latency, delay lateness, memory and idle load on a Redis", run: runBench},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a command and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
		err := c.run(ctx, rest, stdout, stderr)
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
}
