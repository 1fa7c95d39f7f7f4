package queueprobe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/history"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/partitions"
	"github.com/conveyorq/conveyor/internal/pause"
	"github.com/conveyorq/conveyor/internal/registry"
)

// ErrDriver ends the errors of a queue whose driver cannot be told from
// its keys, or was named wrong: the caller must name the right one.
var ErrDriver = errors.New("its driver must be named")

// ErrUnknownQueue marks a queue that no process has used under the
// prefix: it is neither in the registry nor has keys.
var ErrUnknownQueue = errors.New("no process has used it")

// DefaultGroup is the stream driver's default consumer group.
const DefaultGroup = "conveyor"

// Config says where the queues are.
type Config struct {
	// Prefix is the drivers' key prefix. Defaults to keys.DefaultPrefix.
	Prefix string
	// Group is the stream driver's consumer group. Defaults to
	// DefaultGroup.
	Group string
	// Driver is "list" or "stream" to read every queue through that
	// driver, refusing a queue whose keys say otherwise. Defaults to "":
	// each queue's driver is told from its keys.
	Driver string
}

// Set is both durable drivers on one Redis and prefix, each with its
// Inspector. It is safe for concurrent use.
type Set struct {
	rdb     redis.UniversalClient
	cfg     Config
	drivers map[string]broker.Driver
	insps   map[string]*conveyor.Inspector

	mu    sync.Mutex
	split map[string]splitQueue // by "<driver>/<queue>/<partitions>"
}

// splitQueue is a split queue's driver (a shard.Driver over one of the
// set's drivers) and its Inspector.
type splitQueue struct {
	d    broker.Driver
	insp *conveyor.Inspector
}

// New returns the drivers of cfg's prefix on rdb. Their discard records
// are kept whatever their age: a driver enforces the maximum age on every
// read, and a reader does not know the apps' setting, so retention is
// left to the apps' own drivers and a read changes nothing.
func New(rdb redis.UniversalClient, cfg *Config) (*Set, error) {
	s := &Set{rdb: rdb, drivers: map[string]broker.Driver{}, insps: map[string]*conveyor.Inspector{}, split: map[string]splitQueue{}}
	if cfg != nil {
		s.cfg = *cfg
	}
	if s.cfg.Prefix == "" {
		s.cfg.Prefix = keys.DefaultPrefix
	}
	if s.cfg.Group == "" {
		s.cfg.Group = DefaultGroup
	}
	switch s.cfg.Driver {
	case "", "list", "stream":
	default:
		return nil, fmt.Errorf("queueprobe: driver %q: want list or stream", s.cfg.Driver)
	}
	var err error
	if s.drivers["list"], err = list.New(rdb, &list.Config{Prefix: s.cfg.Prefix, DiscardMaxAge: -1}); err != nil {
		return nil, err
	}
	if s.drivers["stream"], err = stream.New(rdb, &stream.Config{Prefix: s.cfg.Prefix, Group: s.cfg.Group, DiscardMaxAge: -1}); err != nil {
		return nil, err
	}
	for name, d := range s.drivers {
		if s.insps[name], err = conveyor.NewInspector(d, nil); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Prefix is the key prefix the set reads.
func (s *Set) Prefix() string { return s.cfg.Prefix }

// Driver returns the driver named "list" or "stream".
func (s *Set) Driver(name string) broker.Driver { return s.drivers[name] }

// Inspector returns the Inspector of the driver named "list" or "stream".
func (s *Set) Inspector(name string) *conveyor.Inspector { return s.insps[name] }

// Shared returns an Inspector for what both drivers keep alike: the queue
// registry and the worker registry.
func (s *Set) Shared() *conveyor.Inspector { return s.insps["list"] }

// Queue is what a queue's keys say about it.
type Queue struct {
	Name string
	// Driver is "list" or "stream" when the keys say which, "" when the
	// queue holds nothing of either's own (only timers, discard records,
	// counters: both drivers keep those alike).
	Driver string
	// Known: the queue is in the registry or has keys.
	Known  bool
	Paused bool
	// Partitions, when over 1, is the partition count a shard.Driver
	// recorded for the queue (broker/shard): its jobs live in that many
	// partitions, which Driver and Paused describe together.
	Partitions int
}

// Probe reads what the keys of queues say about them, in one round trip
// of O(1) commands: the registry's SISMEMBER, the TYPE of the stream
// driver's {q}:stream and of the list driver's {q}:ready, EXISTS of the
// list driver's {q}:lease, of {q}:paused, and of the keys both drivers
// keep ({q}:delayed, {q}:dead, {q}:stats), and GET of {q}:partitions. A
// split queue's partitions are probed in a second round trip, and what
// they say is the queue's.
func (s *Set) Probe(ctx context.Context, queues ...string) ([]Queue, error) {
	out, err := s.probe(ctx, queues)
	if err != nil {
		return nil, err
	}
	var parts []string
	for _, q := range out {
		if q.Partitions > 1 {
			parts = append(parts, shard.PartitionNames(q.Name, q.Partitions)...)
		}
	}
	if len(parts) == 0 {
		return out, nil
	}
	pq, err := s.probe(ctx, parts)
	if err != nil {
		return nil, err
	}
	for k := range out {
		q := &out[k]
		if q.Partitions <= 1 {
			continue
		}
		for _, p := range pq[:q.Partitions] {
			switch {
			case p.Driver != "" && q.Driver != "" && p.Driver != q.Driver:
				return nil, fmt.Errorf("queue %q has partitions of both the list and the stream driver: %w", q.Name, ErrDriver)
			case p.Driver != "":
				q.Driver = p.Driver
			}
			q.Paused = q.Paused || p.Paused
		}
		q.Known = true
		pq = pq[q.Partitions:]
	}
	return out, nil
}

// probe is Probe without a look into split queues' partitions.
func (s *Set) probe(ctx context.Context, queues []string) ([]Queue, error) {
	type reads struct {
		member                *redis.BoolCmd
		streamType, readyType *redis.StatusCmd
		lease, paused, shared *redis.IntCmd
		parts                 *redis.StringCmd
	}
	prefix := s.cfg.Prefix
	rs := make([]reads, len(queues))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range queues {
			qk := keys.Queue(prefix, q)
			rs[k] = reads{
				member:     p.SIsMember(ctx, registry.Key(prefix), q),
				streamType: p.Type(ctx, qk.Part("stream")),
				readyType:  p.Type(ctx, qk.Part("ready")),
				lease:      p.Exists(ctx, qk.Part("lease")),
				paused:     p.Exists(ctx, pause.Key(prefix, q)),
				shared:     p.Exists(ctx, qk.Part("delayed"), qk.Part("dead"), qk.Part("stats")),
				parts:      p.Get(ctx, partitions.Key(prefix, q)),
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the queues' keys: %w", err)
	}
	out := make([]Queue, len(queues))
	for k, r := range rs {
		isStream := r.streamType.Val() == "stream"
		isList := r.readyType.Val() == "list" || r.lease.Val() > 0
		q := Queue{Name: queues[k], Paused: r.paused.Val() > 0}
		if n, err := strconv.Atoi(r.parts.Val()); err == nil && n > 1 && n <= shard.MaxPartitions {
			q.Partitions = n
		}
		switch {
		case isStream && isList:
			return nil, fmt.Errorf("queue %q has keys of both the list and the stream driver: %w", queues[k], ErrDriver)
		case isStream:
			q.Driver = "stream"
		case isList:
			q.Driver = "list"
		}
		q.Known = r.member.Val() || q.Driver != "" || q.Paused || r.shared.Val() > 0
		out[k] = q
	}
	return out, nil
}

// DriverOf returns the driver to use for the queue q describes: the
// configured one when set (refused when the keys say otherwise), else the
// one its keys say. A queue whose keys do not say is read alike by both,
// so reads use the list driver; write says the caller stores jobs in the
// ready structure, which differs: it then fails with ErrDriver.
func (s *Set) DriverOf(q Queue, write bool) (string, error) {
	forced := s.cfg.Driver
	switch {
	case forced != "" && q.Driver != "" && forced != q.Driver:
		return "", fmt.Errorf("queue %q is a %s queue (its keys say so), not %s: %w", q.Name, q.Driver, forced, ErrDriver)
	case forced != "":
		return forced, nil
	case q.Driver != "":
		return q.Driver, nil
	case write:
		return "", fmt.Errorf("the keys of queue %q do not say which driver it uses (it holds no ready or in-flight jobs): %w", q.Name, ErrDriver)
	}
	return "list", nil
}

// Open probes one queue and returns it, with Driver set to the driver to
// use (DriverOf), and that driver's Inspector. A queue that is neither in
// the registry nor has keys fails with ErrUnknownQueue, unless mayBeNew
// (the caller is about to enqueue to it).
func (s *Set) Open(ctx context.Context, queue string, write, mayBeNew bool) (*conveyor.Inspector, Queue, error) {
	qs, err := s.Probe(ctx, queue)
	if err != nil {
		return nil, Queue{}, err
	}
	q := qs[0]
	if !q.Known && !mayBeNew {
		return nil, q, fmt.Errorf("queue %q: %w", queue, ErrUnknownQueue)
	}
	name, err := s.DriverOf(q, write)
	if err != nil {
		return nil, q, err
	}
	q.Driver = name
	return s.inspectorOf(q), q, nil
}

// DriverFor returns the driver that reads and writes the queue q describes,
// its Driver set (by Open): the set's driver of that name, or for a split
// queue a shard.Driver over it with the queue's recorded partitions.
func (s *Set) DriverFor(q Queue) broker.Driver {
	if q.Partitions <= 1 {
		return s.drivers[q.Driver]
	}
	return s.splitOf(q).d
}

// inspectorOf is DriverFor's Inspector.
func (s *Set) inspectorOf(q Queue) *conveyor.Inspector {
	if q.Partitions <= 1 {
		return s.insps[q.Driver]
	}
	return s.splitOf(q).insp
}

// splitOf returns (making it the first time) the shard.Driver of the
// split queue q, over the set's driver q.Driver, and its Inspector.
func (s *Set) splitOf(q Queue) splitQueue {
	key := fmt.Sprintf("%s/%s/%d", q.Driver, q.Name, q.Partitions)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sq, ok := s.split[key]; ok {
		return sq
	}
	d, err := shard.New(s.drivers[q.Driver], shard.Config{Queues: map[string]int{q.Name: q.Partitions}})
	if err != nil {
		panic(err) // the count was checked when it was read (1 to shard.MaxPartitions)
	}
	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		panic(err) // a nil config over a valid driver
	}
	sq := splitQueue{d: d, insp: insp}
	s.split[key] = sq
	return sq
}

// Queues returns the queues of the registry, sorted by name, each split
// queue once under its own name instead of its partitions' (read: the
// registry in pages of 1,000, then one GET of {q}:partitions for each
// name a partition's could be).
func (s *Set) Queues(ctx context.Context) ([]string, error) {
	names, err := s.Shared().Queues(ctx)
	if err != nil {
		return nil, err
	}
	var bases []string
	seen := map[string]bool{}
	for _, n := range names {
		if i := strings.LastIndexByte(n, '#'); i > 0 && !seen[n[:i]] {
			seen[n[:i]] = true
			bases = append(bases, n[:i])
		}
	}
	if len(bases) == 0 {
		return names, nil
	}
	counts := make([]*redis.StringCmd, len(bases))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, b := range bases {
			counts[k] = p.Get(ctx, partitions.Key(s.Prefix(), b))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the queues' partition counts: %w", err)
	}
	part := map[string]bool{}
	listed := map[string]bool{}
	for _, n := range names {
		listed[n] = true
	}
	for k, b := range bases {
		n, err := strconv.Atoi(counts[k].Val())
		if err != nil || n <= 1 || n > shard.MaxPartitions {
			continue
		}
		for _, p := range shard.PartitionNames(b, n) {
			part[p] = true
		}
		if !listed[b] {
			listed[b] = true
			names = append(names, b)
		}
	}
	out := names[:0]
	for _, n := range names {
		if !part[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Figures are a queue's probe and its figures.
type Figures struct {
	Queue
	*conveyor.QueueSizes
}

// Overview returns every queue of the registry, sorted by name, with what
// its keys say and its figures read by its driver: the registry (one
// round trip per 1,000 queues), one pipeline of O(1) reads per queue
// (Probe), then one pipeline of one script per queue per driver
// (Inspector.QueueSizes). Queue.Driver is as the keys say ("" when they
// do not).
func (s *Set) Overview(ctx context.Context) ([]Figures, error) {
	names, err := s.Queues(ctx)
	if err != nil {
		return nil, err
	}
	return s.Figures(ctx, names...)
}

// Figures returns the queues named, in order, with what their keys say
// and their figures: Overview for a set of queues, such as one page of
// the registry's.
func (s *Set) Figures(ctx context.Context, names ...string) ([]Figures, error) {
	probes, err := s.Probe(ctx, names...)
	if err != nil {
		return nil, err
	}
	byDriver := map[string][]int{}
	out := make([]Figures, len(names))
	for k, q := range probes {
		d, err := s.DriverOf(q, false)
		if err != nil {
			return nil, err
		}
		if q.Partitions > 1 {
			q.Driver = d
			sizes, err := s.inspectorOf(q).QueueSizes(ctx, q.Name)
			if err != nil {
				return nil, err
			}
			out[k] = Figures{Queue: probes[k], QueueSizes: sizes[0]}
			continue
		}
		byDriver[d] = append(byDriver[d], k)
	}
	for d, idx := range byDriver {
		qs := make([]string, len(idx))
		for k, i := range idx {
			qs[k] = names[i]
		}
		sizes, err := s.insps[d].QueueSizes(ctx, qs...)
		if err != nil {
			return nil, err
		}
		for k, i := range idx {
			out[i] = Figures{Queue: probes[i], QueueSizes: sizes[k]}
		}
	}
	return out, nil
}

// Histories returns the history samples since of each queue named, in
// order, in one pipeline: what the queues' keepers recorded
// (broker.Historian). Both durable drivers keep a queue's history under
// the same key, so no probe is needed.
func (s *Set) Histories(ctx context.Context, since time.Time, queues ...string) ([][]broker.Sample, error) {
	ks := make([]string, len(queues))
	for k, q := range queues {
		ks[k] = history.Key(s.Prefix(), q)
	}
	return history.ReadMany(ctx, s.rdb, ks, since)
}
