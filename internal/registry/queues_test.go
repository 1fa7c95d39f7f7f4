package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// replies records the name and reply length of every command a client
// sends.
type replies struct {
	mu   sync.Mutex
	cmds []string
	max  int // members in the longest reply of a set read
}

func (r *replies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *replies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.cmds = append(r.cmds, cmd.Name())
		n := 0
		switch c := cmd.(type) {
		case *redis.StringSliceCmd:
			n = len(c.Val())
		case *redis.ScanCmd:
			keys, _ := c.Val()
			n = len(keys)
		}
		r.max = max(r.max, n)
		return err
	}
}

func (r *replies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestQueuesReadsInPages: the registry is read in pages (SSCAN), never in
// one reply as long as the number of queues (SMEMBERS), and the pages give
// every registered queue once, sorted, without members that are no queue
// name.
func TestQueuesReadsInPages(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	const n = 2500
	var want []string
	members := make([]any, 0, n)
	for i := range n {
		q := fmt.Sprintf("queue-%05d", i)
		want = append(want, q)
		members = append(members, q)
	}
	members = append(members, "a{b", "") // written by hand: no queue names
	if err := rdb.SAdd(ctx, Key(prefix), members...).Err(); err != nil {
		t.Fatal(err)
	}
	r := &replies{}
	rdb.AddHook(r)
	got, err := Queues(ctx, rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Queues returned %d names, want the %d registered queues, sorted", len(got), n)
	}
	if slices.Contains(r.cmds, "smembers") || !slices.Contains(r.cmds, "sscan") {
		t.Fatalf("Queues sent %v, want SSCAN pages and no SMEMBERS", r.cmds)
	}
	if r.max > 2*pageSize {
		t.Fatalf("a reply held %d members, want pages of about %d", r.max, pageSize)
	}
	t.Logf("%d queues read in %d commands, the longest reply %d members", n, len(r.cmds), r.max)
}
