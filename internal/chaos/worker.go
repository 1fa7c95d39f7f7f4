package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/worker"
)

// jobArgs is the payload of every chaos job.
type jobArgs struct {
	// Seq numbers the job in its run: the harness maps every handler run
	// back to the Enqueue call that asked for it, even a call that failed.
	Seq int `json:"seq"`
	// Ms is the handler's run time.
	Ms int `json:"ms"`
	// Fail makes the handler fail its first Fail attempts (a planned retry).
	Fail int `json:"fail,omitempty"`
	// Discard makes the handler discard the job (conveyor.SkipRetry).
	Discard bool `json:"discard,omitempty"`
	// Pad fills the payload (the full-Redis scenario).
	Pad string `json:"pad,omitempty"`
}

const jobKind = "chaos"

// workerFlags are what the harness passes to a worker process.
type workerFlags struct {
	driver, addr, user, pass, prefix, queue string
	concurrency                             int
	lease                                   time.Duration
}

func (f *workerFlags) args() []string {
	return []string{"worker", "-driver", f.driver, "-addr", f.addr, "-user", f.user, "-pass", f.pass,
		"-prefix", f.prefix, "-queue", f.queue, "-concurrency", strconv.Itoa(f.concurrency), "-lease", f.lease.String()}
}

func parseWorkerFlags(args []string) (*workerFlags, error) {
	var f workerFlags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&f.driver, "driver", "list", "list or stream")
	fs.StringVar(&f.addr, "addr", "", "Redis host:port")
	fs.StringVar(&f.user, "user", "", "ACL user")
	fs.StringVar(&f.pass, "pass", "", "ACL password")
	fs.StringVar(&f.prefix, "prefix", "chaos", "key prefix")
	fs.StringVar(&f.queue, "queue", "q", "queue")
	fs.IntVar(&f.concurrency, "concurrency", 4, "pool concurrency")
	fs.DurationVar(&f.lease, "lease", time.Second, "visibility timeout")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return &f, nil
}

// newDriver builds the driver a producer or worker uses, as an application
// would: go-redis's default options, the driver's defaults.
func newDriver(name string, rdb redis.UniversalClient, prefix string, log *slog.Logger) (broker.Driver, error) {
	switch name {
	case "list":
		return list.New(rdb, &list.Config{Prefix: prefix, Logger: log})
	case "stream":
		return stream.New(rdb, &stream.Config{Prefix: prefix, Logger: log})
	}
	return nil, fmt.Errorf("unknown driver %q", name)
}

// eventWriter writes the worker's events to stdout, one line per write(2),
// so that a SIGKILL leaves whole lines only.
type eventWriter struct {
	mu  sync.Mutex
	out io.Writer
}

func (w *eventWriter) emit(format string, args ...any) {
	b := fmt.Appendf(nil, format+"\n", args...)
	w.mu.Lock()
	_, _ = w.out.Write(b)
	w.mu.Unlock()
}

// runWorker is a worker process: a pool on the chaos queue whose handler
// reports every run on stdout:
//
//	READY                                 the pool is about to run
//	S <run> <unix ns> <id> <seq> <recoveries> <attempt>   a handler run starts
//	D <run> <unix ns>                     it returned nil
//	E <run> <unix ns>                     it returned an error
//	F <run> <outcome>                     the pool is done with it (OnFinish)
//
// It runs until its stdin closes (the harness stops it) or it is killed.
func runWorker(args []string) error {
	f, err := parseWorkerFlags(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb := redis.NewClient(&redis.Options{Addr: f.addr, Username: f.user, Password: f.pass})
	defer rdb.Close()
	d, err := newDriver(f.driver, rdb, f.prefix, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	err = d.Check(cctx)
	ccancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return fmt.Errorf("check: %w", err)
	}

	ev := &eventWriter{out: os.Stdout}
	var runs atomic.Int64
	mux := worker.NewMux()
	worker.HandleJSON(mux, jobKind, func(ctx context.Context, job *conveyor.Job, a jobArgs) error {
		r := runs.Add(1)
		ev.emit("S %d %d %s %d %d %d", r, time.Now().UnixNano(), job.ID, a.Seq, job.Recoveries, job.Retries)
		job.OnFinish(func(s conveyor.Settlement) { ev.emit("F %d %s", r, s.Outcome) })
		t := time.NewTimer(time.Duration(a.Ms) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			ev.emit("E %d %d", r, time.Now().UnixNano())
			return context.Cause(ctx)
		}
		switch {
		case job.Retries < a.Fail:
			ev.emit("E %d %d", r, time.Now().UnixNano())
			return errors.New("chaos: planned failure")
		case a.Discard:
			ev.emit("E %d %d", r, time.Now().UnixNano())
			return conveyor.SkipRetry(errors.New("chaos: planned discard"))
		}
		ev.emit("D %d %d", r, time.Now().UnixNano())
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{
		Queue:             f.queue,
		Concurrency:       f.concurrency,
		VisibilityTimeout: f.lease,
		ShutdownGrace:     2 * time.Second,
		// Planned failures come back soon, through the delay timers.
		Backoff: func(int) time.Duration { return 100 * time.Millisecond },
		Logger:  log,
	})
	if err != nil {
		return err
	}
	ev.emit("READY")
	return pool.Run(ctx)
}
