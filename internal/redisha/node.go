package redisha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// pollEvery is how often the waits look again. Fail-over and start-up give
// no event to wait on: the servers' state is read until it is the wanted one.
const pollEvery = 50 * time.Millisecond

// defaultWait bounds a wait whose ctx has no deadline.
const defaultWait = 30 * time.Second

// dataArgs are given to every master and replica, before the config's
// Args. A master sends a replica its data straight from memory; by default
// it first waits 5 s for more replicas to sync with, which would make every
// start (and every resync after a fail-over) 5 s longer.
var dataArgs = []string{"--repl-diskless-sync-delay", "0"}

// node is a data server (master or replica) a Sentinel or Cluster started.
type node struct {
	proc   *redisproc.Server
	rdb    *redis.Client
	killed bool // guarded by the owner's mutex
}

func (n *node) addr() string { return n.proc.Addr() }

// stop SIGKILLs the process, waits for it, and removes its directory
// (unless the config asked to keep it).
func (n *node) stop() {
	_ = n.rdb.Close()
	n.proc.Kill()
	n.proc.Stop()
}

// newClient is a client for reading a server's state: one try per command,
// short timeouts, so a dead server costs a poll little.
func newClient(addr string) *redis.Client {
	return redis.NewClient(clientOptions(addr))
}

func clientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
		PoolSize:              2,
	}
}

// start starts each config's server at once and returns those that
// started (nil for the others) with the errors of those that did not.
func startAll(ctx context.Context, cfgs []*redisproc.Config) ([]*redisproc.Server, error) {
	procs := make([]*redisproc.Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() { procs[i], errs[i] = redisproc.Start(ctx, cfg) })
	}
	wg.Wait()
	return procs, errors.Join(errs...)
}

// poll calls check every pollEvery until it returns nil or ctx ends; then
// it returns check's last error that was not ctx's own.
func poll(ctx context.Context, what string, check func(ctx context.Context) error) error {
	begin := time.Now()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisha: %s: gave up after %v: %w", what, time.Since(begin).Round(time.Millisecond), last)
		case <-tick.C:
		}
	}
}

// withDeadline is ctx, bounded by d when ctx has no deadline.
func withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// role is the first word of ROLE: master, slave or sentinel.
func role(ctx context.Context, rdb *redis.Client) (string, error) {
	v, err := rdb.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", errors.New("empty ROLE reply")
	}
	r, _ := v[0].(string)
	return r, nil
}

// infoField is the value of field in an INFO reply, "" when absent.
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}

// freePort returns a loopback port nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisha: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
