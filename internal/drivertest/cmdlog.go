package drivertest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CmdLog is a go-redis hook (client.AddHook) that records the commands a
// client sends, each round trip as one entry of command names (a pipeline
// has several), so that a test can check what a call costs in round trips.
// The commands go-redis sends to set a connection up are left out.
type CmdLog struct {
	mu    sync.Mutex
	trips [][]string
}

// DialHook implements redis.Hook.
func (l *CmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (l *CmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (l *CmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add(cmds...)
		return next(ctx, cmds)
	}
}

// add logs one round trip, leaving out go-redis's connection set-up.
func (l *CmdLog) add(cmds ...redis.Cmder) {
	var names []string
	for _, c := range cmds {
		switch n := c.Name(); n {
		case "hello", "client", "auth", "select":
		default:
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return
	}
	l.mu.Lock()
	l.trips = append(l.trips, names)
	l.mu.Unlock()
}

// Count returns how many times a command named name was logged since the
// last Take, in any round trip.
func (l *CmdLog) Count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, trip := range l.trips {
		for _, c := range trip {
			if c == name {
				n++
			}
		}
	}
	return n
}

// Take returns the round trips logged since the last Take.
func (l *CmdLog) Take() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.trips
	l.trips = nil
	return out
}

// Expect fails t unless the round trips since the last Take are want (none
// when want is empty); what names the call that sent them.
func (l *CmdLog) Expect(t testing.TB, what string, want ...[]string) {
	t.Helper()
	if got := l.Take(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("%s sent %q, want %q", what, got, want)
	}
}

// ExpectScripted fails t unless the first round trip since the last Take is
// want and any others are EVALs only: those follow a round trip of EVALSHAs
// when a server (a Cluster node) does not have the script yet.
func (l *CmdLog) ExpectScripted(t testing.TB, what string, want []string) {
	t.Helper()
	got := l.Take()
	if len(got) < 1 || !slices.Equal(got[0], want) {
		t.Fatalf("%s sent %q, want %q first", what, got, want)
	}
	for _, trip := range got[1:] {
		for _, c := range trip {
			if c != "eval" {
				t.Fatalf("%s sent %q, want %q then EVALs at most", what, got, want)
			}
		}
	}
}
