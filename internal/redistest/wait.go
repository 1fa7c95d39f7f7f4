package redistest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Eventually waits (at most 5s) until cond holds, looking every 2ms, and
// fails t naming what it waited for.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		<-tick.C
	}
}

// Blocked counts the connections named name (CLIENT SETNAME, go-redis's
// ClientName) that are blocked right now in command cmd (lower case, as
// CLIENT LIST shows it), on every master of a cluster.
func Blocked(t testing.TB, c redis.UniversalClient, name, cmd string) int {
	t.Helper()
	ctx := context.Background()
	var (
		mu    sync.Mutex
		lists []string
	)
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			s, err := m.ClientList(ctx).Result()
			if err == nil {
				mu.Lock()
				lists = append(lists, s)
				mu.Unlock()
			}
			return err
		})
	} else {
		s, err := c.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		lists = append(lists, s)
	}
	n := 0
	for _, s := range lists {
		for line := range strings.Lines(s) {
			f := strings.Fields(line)
			if !slices.Contains(f, "name="+name) || !slices.Contains(f, "cmd="+cmd) {
				continue
			}
			// cmd is the last command, also once it returned: flag b says
			// the connection is blocked right now.
			for _, x := range f {
				if flags, ok := strings.CutPrefix(x, "flags="); ok && strings.Contains(flags, "b") {
					n++
				}
			}
		}
	}
	return n
}
