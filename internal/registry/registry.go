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
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/logs"
	"github.com/conveyorq/conveyor/internal/script"
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
	name  string
	log   *slog.Logger
	known sync.Map // queue name -> struct{}
	n     atomic.Int64
	// pausedUntil (unix ns) holds registrations off for a while after one
	// failed (an ACL without SADD, a registry key of another type), so a
	// hot enqueue path neither sends a doomed SADD nor logs a warning for
	// every call.
	pausedUntil atomic.Int64
}

// retryAfter is how long registrations pause after one failed.
const retryAfter = time.Minute

// New returns the registry of prefix for the driver called name ("list",
// "stream"), which starts its warnings; log receives them (nil: logs.Default()).
func New(prefix, name string, log *slog.Logger) *Registry {
	if log == nil {
		log = logs.Default()
	}
	return &Registry{key: Key(prefix), name: name, log: log}
}

// missing returns the queues of names this registry has not added yet,
// each once; nil when there is none (the common case, allocation-free).
func (r *Registry) missing(names ...string) []string {
	if p := r.pausedUntil.Load(); p != 0 && time.Now().UnixNano() < p {
		return nil
	}
	var out []string
	for _, q := range names {
		if _, ok := r.known.Load(q); ok || slices.Contains(out, q) {
			continue
		}
		out = append(out, q)
	}
	return out
}

// Pending returns the SADD of the queues of names this registry has not
// added yet, for an enqueue to send on its own round trip; nil when there
// is none (the common case, allocation-free). A nil *Pending sends and
// records nothing, so callers need not test for it.
func (r *Registry) Pending(names ...string) *Pending {
	missing := r.missing(names...)
	if missing == nil {
		return nil
	}
	return &Pending{r: r, names: missing}
}

// Pending is the SADD of queues an enqueue adds to the registry: queued on
// the enqueue's pipeline by Add (or Also, or Run), its outcome recorded by
// Done once the pipeline ran.
type Pending struct {
	r     *Registry
	names []string
	cmd   *redis.IntCmd
}

// Add queues the SADD on p.
func (a *Pending) Add(ctx context.Context, p redis.Pipeliner) {
	if a == nil {
		return
	}
	members := make([]any, len(a.names))
	for i, q := range a.names {
		members[i] = q
	}
	a.cmd = p.SAdd(ctx, a.r.key, members...)
}

// Also returns Add as the extra commands of script.Script.RunPipelined:
// none for a nil a.
func (a *Pending) Also(ctx context.Context) []func(redis.Pipeliner) {
	if a == nil {
		return nil
	}
	return []func(redis.Pipeliner){func(p redis.Pipeliner) { a.Add(ctx, p) }}
}

// Run runs one call of s (as s.Run does), with the SADD on the same round
// trip when a is not nil, and records the SADD's outcome (Done).
func (a *Pending) Run(ctx context.Context, c script.Client, s *script.Script, keys []string, args ...any) (any, error) {
	if a == nil {
		return s.Run(ctx, c, keys, args...)
	}
	call := &script.Call{Keys: keys, Args: args}
	s.RunPipelined(ctx, c, []*script.Call{call}, a.Also(ctx)...)
	a.Done(ctx)
	return call.Val, call.Err
}

// Done records the outcome of the SADD, once the pipeline it was queued on
// ran, and reports whether the queues were added (true for a nil a). The
// enqueue's messages are stored whatever it was, so a failure is logged,
// not returned (the caller must not enqueue them again); the queues are
// added again on the next enqueue.
func (a *Pending) Done(ctx context.Context) bool {
	if a == nil {
		return true
	}
	if a.cmd == nil {
		return false // never queued: nothing was sent
	}
	if err := a.r.done(a.cmd, a.names); err != nil {
		a.r.failed(ctx, a.names, err)
		return false
	}
	return true
}

// failed logs a registration that failed and pauses registrations.
func (r *Registry) failed(ctx context.Context, names []string, err error) {
	r.pausedUntil.Store(time.Now().Add(retryAfter).UnixNano())
	r.log.WarnContext(ctx, r.name+": could not add queues to the registry; Inspector.Queues misses them until a later call adds them (tried again in a minute)",
		"queues", names, "error", err)
}

// done remembers names as added when cmd succeeded, and returns cmd's
// error otherwise (then the names are added again next time).
func (r *Registry) done(cmd *redis.IntCmd, names []string) error {
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
// time, nothing after. A failure is logged, not returned: the registry
// serves the Inspector, and must not keep a consumer from opening.
func (r *Registry) Ensure(ctx context.Context, c redis.Cmdable, queue string) {
	if r.missing(queue) == nil {
		return
	}
	if err := r.done(c.SAdd(ctx, r.key, queue), []string{queue}); err != nil {
		r.failed(ctx, []string{queue}, err)
	}
}

// Forget makes this registry add queue again on its next enqueue or Open
// of it, as if it had never added it: for a driver that deleted the queue
// (broker.QueueDeleter), which removed it from the registry.
func (r *Registry) Forget(queue string) {
	if _, loaded := r.known.LoadAndDelete(queue); loaded {
		r.n.Add(-1)
	}
}

// Remove removes queue from the registry of prefix (SREM) and reports
// whether it was there.
func Remove(ctx context.Context, c redis.Cmdable, prefix, queue string) (bool, error) {
	n, err := c.SRem(ctx, Key(prefix), queue).Result()
	if err != nil {
		return false, fmt.Errorf("remove queue %q from the registry: %w", queue, err)
	}
	return n == 1, nil
}

// pageSize is the COUNT of each SSCAN that reads the registry: about that
// many names per reply, however many queues there are.
const pageSize = 1000

// Queues returns the registered queues of prefix, sorted, each once.
// Members that are not valid queue names (written by hand) are left out.
// The set is read in pages (SSCAN, pageSize names each), so that many
// queues never make one outsized reply; a queue registered during the read
// may be missing from it, as from any snapshot.
func Queues(ctx context.Context, c redis.Cmdable, prefix string) ([]string, error) {
	var out []string
	err := ScanSet(ctx, c, Key(prefix), pageSize, func(page []string) error {
		for _, q := range page {
			if broker.ValidateQueue(q) == nil {
				out = append(out, q)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	slices.Sort(out)
	// SSCAN may return a member more than once (the set grew meanwhile).
	return slices.Compact(out), nil
}

// ScanSet walks the SET key in SSCAN pages of about count members, calling
// each with every page, until the walk ends or each or SSCAN fails. A member
// may come in more than one page (the set changed meanwhile).
func ScanSet(ctx context.Context, c redis.Cmdable, key string, count int64, each func(page []string) error) error {
	var cursor uint64
	for {
		page, next, err := c.SScan(ctx, key, cursor, "", count).Result()
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := each(page); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
