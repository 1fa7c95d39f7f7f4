package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

var enqueueSpec = spec{
	name:     "enqueue",
	synopsis: "enqueue <queue> <kind> [-payload text] [-id id] [-delay d | -at time] [flags]",
	args:     []string{"queue", "kind"},
	writes:   true,
	creates:  true,
	about: `Enqueues one job of a kind to a queue, as conveyor.Client.Enqueue does, and
prints its ID. The payload is -payload, else stdin when it is not a
terminal (a pipe, a file), else empty; it is stored as given, at most
1 MiB with the headers. A job with -delay or -at waits as a timer; with
-id, that ID is its business key (cancel finds it by it).

A queue whose keys do not say its driver (a new one, or one with only
delayed or discarded jobs) needs -driver. The limits an app sets on its
own driver or client (a queue's MaxLen, Client middleware) are not
applied.

Cost: one round trip (one more the first time a queue is used, to add it
to the registry).`,
}

// headerFlags collect repeated -header name=value flags.
type headerFlags map[string]string

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want name=value, got %q", v)
	}
	h[name] = value
	return nil
}

func runEnqueue(ctx context.Context, args []string, std stdio) error {
	var (
		payload    string
		hasPayload bool
		at         string
		opts       conveyor.EnqueueOptions
		headers    = headerFlags{}
	)
	s := enqueueSpec
	s.flags = func(fs *flag.FlagSet) {
		fs.Func("payload", "the job's payload (default: stdin when it is not a terminal, else empty)", func(v string) error {
			payload, hasPayload = v, true
			return nil
		})
		fs.StringVar(&opts.ID, "id", "", "the job's ID, a business key (default: a new time-sortable ID)")
		fs.DurationVar(&opts.Delay, "delay", 0, "run the job after this long (a timer), e.g. 30s, 15m")
		fs.StringVar(&at, "at", "", "run the job at this time, RFC 3339 (2030-01-02T15:04:05Z)")
		fs.StringVar(&opts.UniqueKey, "unique-key", "", "refuse the job while another job of the queue holds this key")
		fs.DurationVar(&opts.UniqueFor, "unique-for", 0, "how long -unique-key is held (default 1h)")
		fs.StringVar(&opts.Group, "fifo-group", "", "FIFO group: jobs of one group run -fifo-limit at a time, in enqueue order (docs/ordering.md)")
		fs.IntVar(&opts.GroupLimit, "fifo-limit", 0, "how many jobs of -fifo-group run at once (default 1)")
		fs.IntVar(&opts.MaxAttempts, "max-attempts", 0, "cap on handler runs (default: the pool's)")
		fs.DurationVar(&opts.Timeout, "timeout", 0, "bound on one handler run (default: the pool's)")
		fs.DurationVar(&opts.VisibilityTimeout, "visibility-timeout", 0, "the job's own lease length (default: the pool's)")
		fs.Var(headers, "header", "a header name=value; repeat for more")
	}
	inv, err := s.start(ctx, args, std, func(inv *invocation) (err error) {
		switch {
		case at != "" && opts.Delay != 0:
			return inv.usagef("-at and -delay: give one")
		case at != "":
			if opts.RunAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
				return inv.usagef("-at %q: want an RFC 3339 time such as 2030-01-02T15:04:05Z", at)
			}
		}
		for name, v := range map[string]time.Duration{"delay": opts.Delay, "unique-for": opts.UniqueFor, "timeout": opts.Timeout, "visibility-timeout": opts.VisibilityTimeout} {
			if v < 0 {
				return inv.usagef("-%s %v: want a positive duration", name, v)
			}
		}
		if opts.MaxAttempts < 0 {
			return inv.usagef("-max-attempts %d: want 0 (the pool's) or more", opts.MaxAttempts)
		}
		if opts.UniqueFor != 0 && opts.UniqueKey == "" {
			return inv.usagef("-unique-for without -unique-key")
		}
		if opts.GroupLimit != 0 && opts.Group == "" {
			return inv.usagef("-fifo-limit without -fifo-group")
		}
		if opts.GroupLimit < 0 {
			return inv.usagef("-fifo-limit %d: want 1 or more", opts.GroupLimit)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer inv.close()
	queue, kind := inv.queue, inv.args[1]
	if len(headers) > 0 {
		opts.Headers = headers
	}
	body := []byte(payload)
	if !hasPayload && std.in != nil && !isTerminal(std.in) {
		// One byte past the cap is enough to know the client refuses it.
		if body, err = io.ReadAll(io.LimitReader(std.in, conveyor.DefaultMaxPayloadBytes+1)); err != nil {
			return fmt.Errorf("read the payload from stdin: %w", err)
		}
	}
	p := inv.probe
	client, err := conveyor.NewClient(inv.c.DriverFor(p), &conveyor.ClientConfig{DefaultQueue: queue})
	if err != nil {
		return err
	}
	m, err := client.Enqueue(ctx, kind, body, &opts)
	switch {
	case errors.Is(err, broker.ErrInvalidMessage):
		return inv.usagef("%v", err)
	case err != nil:
		return err
	}
	due := ""
	if !m.RunAt.IsZero() {
		due = ", due " + when(time.Now(), m.RunAt)
	}
	return inv.done(struct {
		ID     string    `json:"id"`
		Queue  string    `json:"queue"`
		Kind   string    `json:"kind"`
		Driver string    `json:"driver"`
		RunAt  time.Time `json:"run_at,omitzero"`
	}{m.ID, m.Queue, m.Kind, p.Driver, m.RunAt.UTC()}, "Enqueued job %s (%s) to queue %q%s.", m.ID, kind, queue, due)
}
