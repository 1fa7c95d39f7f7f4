package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/queueprobe"
)

// target is where an operator command works: the flags every command but
// bench shares.
type target struct {
	redisURL string
	prefix   string
	// driver is "list", "stream", or "" to tell each queue's driver from
	// its keys.
	driver string
	group  string
	json   bool
}

// invocation is one parsed command line of an operator command.
type invocation struct {
	name string
	fs   *flag.FlagSet
	std  stdio
	t    target
	// args are the positional arguments, flags removed.
	args []string
	// c is the connection start opened.
	c *conn
	// queue is the queue the command names, its Inspector and what its
	// keys say; set by start for a command with a "queue" argument.
	queue string
	insp  *conveyor.Inspector
	probe queueprobe.Queue
}

// spec describes an operator command for its parser and its help.
type spec struct {
	name string
	// synopsis is the usage line after "conveyor ".
	synopsis string
	// about says what the command does and what it costs Redis.
	about string
	// args names the positional arguments, in order; those named "queue"
	// must be valid queue names. With more, the last one repeats
	// ("series..." takes one or more, "[series]..." none or more).
	args []string
	// flags adds the command's own flags.
	flags func(fs *flag.FlagSet)
	// writes says the command stores jobs in the queue's ready structure,
	// which differs by driver (queueprobe.Set.DriverOf); creates that the queue may
	// be new.
	writes, creates bool
}

// parse parses args for s. Flags may come before, between or after the
// positional arguments; "--" ends the flags. Bad flags or arguments are
// printed to std.err and returned wrapping errUsage; -h prints the help
// and returns flag.ErrHelp.
func (s *spec) parse(args []string, std stdio) (*invocation, error) {
	inv := &invocation{name: s.name, std: std, fs: flag.NewFlagSet("conveyor "+s.name, flag.ContinueOnError)}
	fs := inv.fs
	fs.SetOutput(io.Discard) // errors are printed below, in one line
	inv.t.flags(fs)
	if s.flags != nil {
		s.flags(fs)
	}
	fs.Usage = func() {} // -h is handled below; errors get one line
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				s.help(std.err, fs)
				return nil, err
			}
			return nil, inv.usagef("%v", err)
		}
		next := fs.Args()
		if len(next) == 0 {
			break
		}
		if used := len(rest) - len(next); used > 0 && rest[used-1] == "--" {
			inv.args = append(inv.args, next...) // everything after "--"
			break
		}
		inv.args = append(inv.args, next[0])
		rest = next[1:]
	}
	repeats := len(s.args) > 0 && strings.HasSuffix(s.args[len(s.args)-1], "...")
	need := len(s.args)
	if repeats && strings.HasPrefix(s.args[need-1], "[") {
		need--
	}
	switch {
	case len(inv.args) < need:
		return nil, inv.usagef("missing %s", strings.TrimSuffix(s.args[len(inv.args)], "..."))
	case len(inv.args) > len(s.args) && !repeats:
		return nil, inv.usagef("unexpected arguments %q", inv.args[len(s.args):])
	}
	for k, name := range s.args {
		if name == "queue" {
			if err := broker.ValidateQueue(inv.args[k]); err != nil {
				return nil, inv.usagef("%v", err)
			}
		}
	}
	if err := inv.t.checkURL(); err != nil {
		// Often REDIS_URL's, not the command line's: one line, without
		// the pointer to the flags' help.
		fmt.Fprintf(std.err, "conveyor %s: %v\n", s.name, err)
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := inv.t.check(); err != nil {
		return nil, inv.usagef("%v", err)
	}
	return inv, nil
}

// start parses args for s, lets check refuse what the flags alone cannot
// (with inv.usagef), connects to the Redis they name and, for a command
// with a "queue" argument, finds the queue and its driver (conn.queue).
// Close the invocation when done.
func (s *spec) start(ctx context.Context, args []string, std stdio, check func(inv *invocation) error) (*invocation, error) {
	inv, err := s.parse(args, std)
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(inv); err != nil {
			return nil, err
		}
	}
	if inv.c, err = inv.t.connect(ctx); err != nil {
		return nil, err
	}
	if k := slices.Index(s.args, "queue"); k >= 0 {
		inv.queue = inv.args[k]
		if inv.insp, inv.probe, err = inv.c.queue(ctx, inv.queue, s.writes, s.creates); err != nil {
			inv.close()
			return nil, inv.fail(err)
		}
	}
	return inv, nil
}

func (inv *invocation) close() { inv.c.close() }

// done prints a command's outcome: v with -json, else the line format
// makes.
func (inv *invocation) done(v any, format string, a ...any) error {
	if inv.t.json {
		return writeJSON(inv.std.out, v)
	}
	_, err := fmt.Fprintf(inv.std.out, format+"\n", a...)
	return err
}

// help prints the command's usage, what it does and costs, and its flags.
func (s *spec) help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: conveyor %s\n\n%s\n\nFlags:\n", s.synopsis, strings.TrimSpace(s.about))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// usagef prints a usage error of the command, with where to find its help,
// and returns it wrapping errUsage (exit status 2).
func (inv *invocation) usagef(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	fmt.Fprintf(inv.std.err, "conveyor %s: %v\nRun 'conveyor help %s' for usage.\n", inv.name, err, inv.name)
	return fmt.Errorf("%w: %v", errUsage, err)
}

// fail returns err as the command's error: a usage error (printed here)
// when it asks for a flag, else err itself (exit status 1, printed by run).
func (inv *invocation) fail(err error) error {
	if errors.Is(err, queueprobe.ErrDriver) {
		return inv.usagef("%v: pass -driver list or -driver stream", err)
	}
	return err
}

// flags adds the shared flags to fs.
func (t *target) flags(fs *flag.FlagSet) {
	url := defaultRedisURL
	if u := os.Getenv("REDIS_URL"); u != "" {
		url = u
	}
	fs.StringVar(&t.redisURL, "redis", url, "Redis URL, redis:// or rediss://; REDIS_URL sets the default")
	fs.StringVar(&t.prefix, "prefix", keys.DefaultPrefix, "key prefix of the queues, the drivers' Config.Prefix")
	fs.StringVar(&t.driver, "driver", "", "list or stream; by default each queue's driver is told from its keys")
	fs.StringVar(&t.group, "group", defaultGroup, "consumer group of the stream driver, its Config.Group")
	fs.BoolVar(&t.json, "json", false, "print JSON for scripts instead of a table")
}

// defaultGroup is the stream driver's default consumer group.
const defaultGroup = queueprobe.DefaultGroup

// echo returns the shared flags that differ from their defaults, as a
// command line writes them, for a command the output suggests. The Redis
// URL is left out: it may hold a password.
func (t *target) echo() string {
	var b strings.Builder
	if t.prefix != keys.DefaultPrefix {
		fmt.Fprintf(&b, " -prefix %s", t.prefix)
	}
	if t.driver != "" {
		fmt.Fprintf(&b, " -driver %s", t.driver)
	}
	if t.group != defaultGroup {
		fmt.Fprintf(&b, " -group %s", t.group)
	}
	return b.String()
}

// check validates the shared flags.
func (t *target) check() error {
	if err := keys.ValidatePrefix(t.prefix); err != nil {
		return fmt.Errorf("-prefix: %v", err)
	}
	switch t.driver {
	case "", "list", "stream":
	default:
		return fmt.Errorf("-driver %q: want list or stream", t.driver)
	}
	if t.group == "" {
		return errors.New("-group is empty")
	}
	return nil
}

// stateNames lists the names -state takes, for messages.
const stateNames = "ready, in-flight, delayed, discarded or finished"

// state reads the -state flag, name: "in-flight" or "in_flight" (the
// Inspector's name) for jobs in flight. An empty name is 0, refused when
// required.
func (inv *invocation) state(name string, required bool) (broker.JobState, error) {
	switch {
	case name == "" && required:
		return 0, inv.usagef("-state is required: %s", stateNames)
	case name == "":
		return 0, nil
	}
	s, err := broker.ParseJobState(strings.ReplaceAll(name, "-", "_"))
	if err != nil {
		return 0, inv.usagef("-state %q: want %s", name, stateNames)
	}
	return s, nil
}

// stateName is how the CLI writes a state: "in-flight" rather than the
// Inspector's "in_flight", as the flags take it.
func stateName(s broker.JobState) string {
	return strings.ReplaceAll(s.String(), "_", "-")
}
