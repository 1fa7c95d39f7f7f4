// Package workers keeps the fleet's registry of worker pools in Redis: it
// implements broker.WorkerRegistry for the drivers, which embed a Registry.
//
// Each pool's entry is one STRING <prefix>:{workers}:w:<id> (the pool's
// broker.WorkerInfo as JSON) with a TTL that Redis enforces, so that the
// entry of a dead process goes within its TTL whatever the clocks of the
// machines say. The SET <prefix>:{workers}:index names the entries, for
// reading them: a pool adds itself once, when it starts (and again if its
// entry had run out), so a beat costs one command, a SET with PX. A reader
// walks the index with SSCAN, reads a page of entries with one MGET, and
// removes the names whose entry ran out. Both keys share the hash tag
// {workers}, so the MGET works on a Cluster.
//
// docs/redis-keys.md describes the keys.
package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/registry"
	"github.com/conveyorq/conveyor/internal/script"
)

// page is the SSCAN COUNT and the MGET size of a read.
const page = 500

// Registry is the registry of one key prefix.
type Registry struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ broker.WorkerRegistry = (*Registry)(nil)

// New returns the registry under prefix.
func New(rdb redis.UniversalClient, prefix string) *Registry {
	return &Registry{rdb: rdb, prefix: prefix}
}

// indexKey is the key of the index SET; entryKey that of one pool's entry.
func (r *Registry) indexKey() string { return r.prefix + ":{workers}:index" }

// entryKey returns the key of the entry of pool id.
func (r *Registry) entryKey(id string) string { return r.prefix + ":{workers}:w:" + id }

// RegisterWorker stores w for ttl: SET ... PX ttl XX, which replaces a live
// entry; only when there was none (the pool's first beat, or one after its
// entry ran out) an SADD to the index and a SET, in one pipeline.
func (r *Registry) RegisterWorker(ctx context.Context, w *broker.WorkerInfo, ttl time.Duration) error {
	if err := validID(w.ID); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("workers: register %q: ttl %v is under 1ms", w.ID, ttl)
	}
	b, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("workers: register %q: %w", w.ID, err)
	}
	key := r.entryKey(w.ID)
	err = r.rdb.SetArgs(ctx, key, b, redis.SetArgs{TTL: ttl, Mode: "XX"}).Err()
	if errors.Is(err, redis.Nil) {
		// No entry before: name it in the index, then store it (one
		// pipeline, no MULTI). A name without an entry is harmless (a
		// reader removes it); an entry without a name would be renewed,
		// unseen, by every later SET XX.
		_, err = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, r.indexKey(), w.ID)
			p.Set(ctx, key, b, ttl)
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("workers: register %q: %w", w.ID, err)
	}
	return nil
}

// UnregisterWorker removes the entry of pool id and its name.
func (r *Registry) UnregisterWorker(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.entryKey(id))
		p.SRem(ctx, r.indexKey(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("workers: unregister %q: %w", id, err)
	}
	return nil
}

// Workers returns the live entries, sorted by ID: SSCAN pages of the index,
// one MGET per page, and per page with names whose entry ran out one short
// script that removes them. An entry that does not decode is skipped.
func (r *Registry) Workers(ctx context.Context) ([]*broker.WorkerInfo, error) {
	var out []*broker.WorkerInfo
	seen := map[string]bool{}
	err := registry.ScanSet(ctx, r.rdb, r.indexKey(), page, func(ids []string) error {
		var fresh []string
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				fresh = append(fresh, id)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		ws, gone, err := r.entries(ctx, fresh)
		if err != nil {
			return err
		}
		out = append(out, ws...)
		if len(gone) > 0 {
			return r.forget(ctx, gone)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workers: read the registry: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// forgetScript removes from the index KEYS[1] each name ARGV[i] whose entry
// KEYS[i+1] does not exist: checked in the script, so that a pool that
// registered again since the caller looked keeps its name.
var forgetScript = script.New("workers/forget", `
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    redis.call('SREM', KEYS[1], ARGV[i])
  end
end
return 0`)

// forget removes the names of entries that ran out from the index.
func (r *Registry) forget(ctx context.Context, ids []string) error {
	keys := make([]string, 1, len(ids)+1)
	keys[0] = r.indexKey()
	args := make([]any, len(ids))
	for i, id := range ids {
		keys = append(keys, r.entryKey(id))
		args[i] = id
	}
	if _, err := forgetScript.Run(ctx, r.rdb, keys, args...); err != nil {
		return fmt.Errorf("forget dead workers: %w", err)
	}
	return nil
}

// entries reads the entries of ids; gone are the ids without one.
func (r *Registry) entries(ctx context.Context, ids []string) ([]*broker.WorkerInfo, []string, error) {
	ks := make([]string, len(ids))
	for i, id := range ids {
		ks[i] = r.entryKey(id)
	}
	vs, err := r.rdb.MGet(ctx, ks...).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("read entries: %w", err)
	}
	var ws []*broker.WorkerInfo
	var gone []string
	for i, v := range vs {
		s, ok := v.(string)
		if !ok {
			gone = append(gone, ids[i])
			continue
		}
		w := new(broker.WorkerInfo)
		if json.Unmarshal([]byte(s), w) == nil && w.ID == ids[i] {
			ws = append(ws, w)
		}
	}
	return ws, gone, nil
}

// Needs are the commands a pool sends to keep its entry (RegisterWorker,
// UnregisterWorker), for a driver's Check. Reading the registry
// (Workers: SSCAN, MGET, and EVALSHA of a script with EXISTS and SREM) is
// the Inspector's, not a pool's, and is not asked for.
func Needs(prefix string) []redischeck.Need {
	r := New(nil, prefix)
	entry, index := r.entryKey("probe"), r.indexKey()
	return []redischeck.Need{
		redischeck.Key(entry, "SET", entry, "v", "PX", "1", "XX"),
		redischeck.Key(entry, "DEL", entry),
		redischeck.Key(index, "SADD", index, "m"),
		redischeck.Key(index, "SREM", index, "m"),
	}
}

// validID refuses what cannot name an entry: empty, too long, or with
// bytes that would move the key's hash tag or make it unprintable.
func validID(id string) error {
	if id == "" || len(id) > maxID {
		return fmt.Errorf("workers: worker ID %q: want 1 to %d bytes", id, maxID)
	}
	if i := strings.IndexFunc(id, badIDRune); i >= 0 {
		return fmt.Errorf("workers: worker ID %q: byte %d is a space, a brace or not printable ASCII", id, i)
	}
	return nil
}

// maxID bounds a worker ID's length.
const maxID = 200

// badIDRune reports whether r may not be in a worker ID.
func badIDRune(r rune) bool { return r <= ' ' || r == '{' || r == '}' || r >= 0x7f }

// NewID returns a new pool ID, valid for RegisterWorker: host (at most 150
// bytes, with what badIDRune refuses made '_'), process ID and 8 random
// hex digits.
func NewID(host string, pid int) string {
	if host == "" {
		host = "unknown"
	}
	host = strings.Map(func(r rune) rune {
		if badIDRune(r) {
			return '_'
		}
		return r
	}, host)
	if len(host) > 150 {
		host = host[:150]
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return host + "-" + strconv.Itoa(pid) + "-" + hex.EncodeToString(b[:])
}
