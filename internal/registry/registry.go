// Package registry keeps the set of queues known under a key prefix, so
// that an Inspector can list them without KEYS or SCAN: the SET
// <prefix>:queues (docs/redis-keys.md). It is not a key of any queue (no
// hash tag), so it is always written by a command of its own, never inside
// a queue's script.
//
// A driver adds a queue the first time it enqueues to it or opens a
// consumer on it, and remembers that it did: after that its hot paths send
// nothing more for the queue.
package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
)

// Key returns the registry's key under prefix.
func Key(prefix string) string { return prefix + ":queues" }

// maxRemembered caps the queue names one Registry remembers, so that a
// process enqueueing to ever new queues does not grow it without bound;
// past the cap it adds the others every time (SADD of a member already
// there changes nothing).
const maxRemembered = 4096

// Registry is one driver's view of the registry: the queues it has added.
// It is safe for concurrent use.
type Registry struct {
	key   string
	known sync.Map // queue name -> struct{}
	n     atomic.Int64
}

// New returns the registry of prefix.
func New(prefix string) *Registry { return &Registry{key: Key(prefix)} }

// Missing returns the queues of names this registry has not added yet,
// each once; nil when there is none (the common case, allocation-free).
func (r *Registry) Missing(names ...string) []string {
	var out []string
	for _, q := range names {
		if _, ok := r.known.Load(q); ok || slices.Contains(out, q) {
			continue
		}
		out = append(out, q)
	}
	return out
}

// Add queues the SADD of names on p; after p runs, Done(cmd, names) records
// the outcome.
func (r *Registry) Add(ctx context.Context, p redis.Pipeliner, names []string) *redis.IntCmd {
	members := make([]any, len(names))
	for i, q := range names {
		members[i] = q
	}
	return p.SAdd(ctx, r.key, members...)
}

// Done remembers names as added when cmd succeeded, and returns cmd's
// error otherwise (then the names are added again next time).
func (r *Registry) Done(cmd *redis.IntCmd, names []string) error {
	if err := cmd.Err(); err != nil {
		return fmt.Errorf("register queues: %w", err)
	}
	for _, q := range names {
		if r.n.Load() >= maxRemembered {
			return nil
		}
		if _, loaded := r.known.LoadOrStore(q, struct{}{}); !loaded {
			r.n.Add(1)
		}
	}
	return nil
}

// Ensure adds queue unless this registry already did: one SADD the first
// time, nothing after.
func (r *Registry) Ensure(ctx context.Context, c redis.Cmdable, queue string) error {
	if _, ok := r.known.Load(queue); ok {
		return nil
	}
	return r.Done(c.SAdd(ctx, r.key, queue), []string{queue})
}

// Queues returns the registered queues of prefix, sorted. Members that are
// not valid queue names (written by hand) are left out.
func Queues(ctx context.Context, c redis.Cmdable, prefix string) ([]string, error) {
	all, err := c.SMembers(ctx, Key(prefix)).Result()
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	out := all[:0]
	for _, q := range all {
		if broker.ValidateQueue(q) == nil {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out, nil
}
