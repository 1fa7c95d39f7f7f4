package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/errlist"
)

// MaxPartitions is the most partitions a queue may have.
const MaxPartitions = 1024

// Config says which queues are split and into how many partitions.
type Config struct {
	// Partitions is the partition count of every queue that Queues does not
	// name. 0 or 1 leaves such queues whole (the inner driver's own queue).
	Partitions int
	// Queues sets the partition count of the queues it names (1 leaves a
	// queue whole).
	Queues map[string]int
	// Logger receives the errors a sharded queue's consumer meets while it
	// fetches from a partition in the background (it retries them).
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// Recorder is implemented by drivers that record a queue's partition count
// in Redis (the list and stream drivers do). With it, a Driver refuses to
// serve a queue whose recorded count differs from its configuration.
type Recorder interface {
	// RecordPartitions records n as queue's partition count unless a count
	// is recorded already, and returns the recorded count.
	RecordPartitions(ctx context.Context, queue string, n int) (int, error)
}

// Driver is a broker.Driver that splits queues into partitions of an inner
// driver. It implements every optional broker interface the inner driver
// does, on the logical queue.
type Driver struct {
	d   broker.Driver
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	parts   map[string][]string // logical queue -> its partitions' names
	checked map[string]bool     // queues whose recorded count matched
}

// New returns a Driver over d. It fails when a count in cfg is out of range
// or a queue name in it is invalid.
func New(d broker.Driver, cfg Config) (*Driver, error) {
	if d == nil {
		return nil, errors.New("conveyor: shard.New: nil driver")
	}
	if cfg.Partitions < 0 || cfg.Partitions > MaxPartitions {
		return nil, fmt.Errorf("conveyor: shard: Partitions is %d, want 0 to %d", cfg.Partitions, MaxPartitions)
	}
	for q, n := range cfg.Queues {
		if err := broker.ValidateQueue(q); err != nil {
			return nil, fmt.Errorf("conveyor: shard: Queues: %w", err)
		}
		if n < 1 || n > MaxPartitions {
			return nil, fmt.Errorf("conveyor: shard: Queues[%q] is %d, want 1 to %d", q, n, MaxPartitions)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Driver{d: d, cfg: cfg, log: log, parts: make(map[string][]string), checked: make(map[string]bool)}, nil
}

// Inner returns the driver the partitions live in.
func (d *Driver) Inner() broker.Driver { return d.d }

// Count returns how many partitions queue has (1: it is whole).
func (d *Driver) Count(queue string) int {
	if n, ok := d.cfg.Queues[queue]; ok {
		return n
	}
	return max(1, d.cfg.Partitions)
}

// Partitions returns the names of queue's partitions in the inner driver:
// queue itself when it is whole, else names of the form queue#n, one per
// partition, chosen so that their hash slots spread evenly over the 16,384
// slots of a Redis Cluster (partition k's slot lies in the k-th of Count
// equal ranges), so the partitions of a queue spread over the shards of a
// cluster whose shards hold equal ranges. The names depend only on the
// queue's name and count.
func (d *Driver) Partitions(queue string) []string {
	n := d.Count(queue)
	if n == 1 {
		return []string{queue}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ps, ok := d.parts[queue]; ok {
		return ps
	}
	ps := PartitionNames(queue, n)
	d.parts[queue] = ps
	return ps
}

// PartitionNames returns the names of the n partitions of queue (queue
// itself when n is 1), as Driver.Partitions does for a queue of that
// count: for each of n equal ranges of hash slots, the name queue#s with
// the least s whose slot falls in that range. Tools that read a split
// queue's keys (the CLI, the dashboard) name its partitions with it.
func PartitionNames(queue string, n int) []string {
	if n <= 1 {
		return []string{queue}
	}
	ps := make([]string, n)
	left := n
	for s := 0; left > 0; s++ {
		name := queue + "#" + strconv.Itoa(s)
		k := int(slot(name)) * n / slots
		if ps[k] == "" {
			ps[k] = name
			left--
		}
	}
	return ps
}

// logical returns the queue whose partition name is and the partition's
// index, or ok false when name is no partition of a sharded queue.
func (d *Driver) logical(name string) (queue string, k int, ok bool) {
	i := strings.LastIndexByte(name, '#')
	if i <= 0 {
		return "", 0, false
	}
	queue = name[:i]
	for k, p := range d.Partitions(queue) {
		if p == name && p != queue {
			return queue, k, true
		}
	}
	return "", 0, false
}

// Logical returns the queue whose partition name is, or name itself when
// it is no partition.
func (d *Driver) Logical(name string) string {
	if q, _, ok := d.logical(name); ok {
		return q
	}
	return name
}

// route returns the index of the partition msg belongs in among n: by its
// group (so a group's jobs keep their order), else its unique key (so a
// duplicate meets its original), else its ID (so a timer is found by its
// ID without asking every partition).
func route(m *broker.Message, n int) int {
	if n == 1 {
		return 0
	}
	key := m.ID
	switch {
	case m.Group != "":
		key = "g:" + m.Group
	case m.UniqueKey != "":
		key = "u:" + m.UniqueKey
	}
	return hashIndex(key, n)
}

// PartitionOf returns the name of the partition (of its queue) that m
// goes to: the queue's own name when the queue is whole.
func (d *Driver) PartitionOf(m *broker.Message) string {
	ps := d.Partitions(m.Queue)
	return ps[route(m, len(ps))]
}

// byID returns the index of the partition a job of this ID without a group
// or unique key is in.
func byID(id string, n int) int { return hashIndex(id, n) }

func hashIndex(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// check makes sure the recorded partition count of queue is the configured
// one (once per queue and Driver).
func (d *Driver) check(ctx context.Context, queue string) error {
	r, ok := d.d.(Recorder)
	if !ok {
		return nil
	}
	d.mu.Lock()
	done := d.checked[queue]
	d.mu.Unlock()
	if done {
		return nil
	}
	n := d.Count(queue)
	want := n
	if n > 1 {
		// A queue that holds jobs of its own was used whole, before any
		// count was recorded: record it as whole (unless a count is
		// recorded already), so that splitting it is refused rather than
		// leaving its jobs where no partition's consumer looks.
		whole, err := d.holdsJobs(ctx, queue)
		if err != nil {
			return fmt.Errorf("conveyor: shard: look for jobs of queue %q stored whole: %w", queue, err)
		}
		if whole {
			want = 1
		}
	}
	got, err := r.RecordPartitions(ctx, queue, want)
	if err != nil {
		return fmt.Errorf("conveyor: shard: record the partition count of queue %q: %w", queue, err)
	}
	if got != n {
		return &CountError{Queue: queue, Recorded: got, Configured: n}
	}
	d.mu.Lock()
	d.checked[queue] = true
	d.mu.Unlock()
	return nil
}

// holdsJobs reports whether queue itself (not a partition) holds ready,
// in-flight, delayed or waiting jobs, when the inner driver can tell.
func (d *Driver) holdsJobs(ctx context.Context, queue string) (bool, error) {
	in, ok := d.d.(broker.Inspector)
	if !ok {
		return false, nil
	}
	sizes, err := in.QueueSizes(ctx, queue)
	if err != nil || len(sizes) != 1 {
		return false, err
	}
	s := sizes[0]
	return s.Ready+s.InFlight+s.Delayed+s.Grouped+s.Limited > 0, nil
}

// ErrCountChanged is wrapped by every *CountError.
var ErrCountChanged = errors.New("conveyor: partition count changed")

// CountError reports a queue configured with a partition count other than
// the one recorded in Redis when the queue was first used. Jobs would be
// routed to other partitions than their group's or unique key's earlier
// jobs, so the driver refuses the queue; docs/scale-out.md says how to
// change a queue's count.
type CountError struct {
	Queue      string
	Recorded   int
	Configured int
}

func (e *CountError) Error() string {
	if e.Recorded == 1 {
		return fmt.Sprintf("conveyor: queue %q is stored whole in Redis (not in partitions) but is configured with %d partitions: "+
			"a live queue's partition count cannot change (drain and delete the queue first, or use a new queue name)",
			e.Queue, e.Configured)
	}
	return fmt.Sprintf("conveyor: queue %q has %d partitions in Redis but is configured with %d: "+
		"a live queue's partition count cannot change (drain and delete the queue first, or use a new queue name)",
		e.Queue, e.Recorded, e.Configured)
}

func (e *CountError) Unwrap() error { return ErrCountChanged }

// Capabilities reports the inner driver's, without FIFO when any queue
// may be split: jobs of different partitions are fetched in no set order
// (jobs of one group keep theirs).
func (d *Driver) Capabilities() broker.Capabilities {
	c := d.d.Capabilities()
	if d.cfg.Partitions > 1 {
		c.FIFO = false
	}
	for _, n := range d.cfg.Queues {
		if n > 1 {
			c.FIFO = false
		}
	}
	return c
}

// Check checks the inner driver.
func (d *Driver) Check(ctx context.Context) error { return d.d.Check(ctx) }

// Enqueue stores each message in its partition (see Partitions), in one
// call of the inner driver. The messages' fields the inner driver sets are
// set on msgs; errors name the logical queue.
func (d *Driver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	inner := make([]*broker.Message, 0, len(msgs))
	outer := make(map[*broker.Message]*broker.Message, len(msgs))
	byPart := make(map[string][]*broker.Message) // a split queue's partition -> the caller's messages in it
	var errs *multierror.Error
	refused := make(map[string]bool)
	for _, m := range msgs {
		if m == nil {
			return errors.New("conveyor: Enqueue: nil message")
		}
		// An invalid message fails the whole call, as in the drivers.
		if err := broker.ValidateMessage(m); err != nil {
			return err
		}
	}
	for _, m := range msgs {
		if refused[m.Queue] {
			continue
		}
		if err := d.check(ctx, m.Queue); err != nil {
			refused[m.Queue] = true
			errs = multierror.Append(errs, &broker.QueueError{Queue: m.Queue, Err: err})
			continue
		}
		c := *m
		c.Queue = d.PartitionOf(m)
		inner = append(inner, &c)
		outer[&c] = m
		if c.Queue != m.Queue {
			byPart[c.Queue] = append(byPart[c.Queue], m)
		}
	}
	var err error
	if len(inner) > 0 {
		err = d.d.Enqueue(ctx, inner)
	}
	for _, c := range inner {
		m := outer[c]
		q := m.Queue
		*m = *c
		m.Queue = q
	}
	if err = d.outerErr(err, outer, byPart); err == nil {
		return errs.ErrorOrNil()
	}
	if errs == nil {
		return err
	}
	return multierror.Append(errs, errlist.Split(err)...)
}

// outerErr rewrites the partition names and messages in err (from the
// inner driver) to the logical queue's and the caller's. A refusal of one
// partition of a split queue names the caller's messages it concerns
// (QueueError.Messages, from byPart): the queue's other partitions stored
// theirs.
func (d *Driver) outerErr(err error, outer map[*broker.Message]*broker.Message, byPart map[string][]*broker.Message) error {
	if err == nil {
		return nil
	}
	for _, e := range errlist.Split(err) {
		var qe *broker.QueueError
		if errors.As(e, &qe) {
			if ms, ok := byPart[qe.Queue]; ok {
				qe.Messages = ms
			} else {
				for i, m := range qe.Messages {
					if o := outer[m]; o != nil {
						qe.Messages[i] = o
					}
				}
			}
			qe.Queue = d.Logical(qe.Queue)
		}
		var de *broker.DuplicateError
		if errors.As(e, &de) {
			de.Queue = d.Logical(de.Queue)
			if m := outer[de.Message]; m != nil {
				de.Message = m
			}
		}
		var ie *broker.InFlightError
		if errors.As(e, &ie) {
			ie.Queue = d.Logical(ie.Queue)
		}
	}
	return err
}

// Open starts consuming queue. A sharded queue's consumer holds one inner
// consumer per partition and fetches nothing ahead: each Fetch takes the
// jobs of one partition, the partitions taking turns, and waits on all of
// them while they are all empty.
func (d *Driver) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, err
	}
	if err := d.check(ctx, queue); err != nil {
		return nil, err
	}
	ps := d.Partitions(queue)
	if len(ps) == 1 {
		return d.d.Open(ctx, queue, opts)
	}
	return d.openSharded(ctx, queue, ps, opts)
}

var _ broker.Driver = (*Driver)(nil)
