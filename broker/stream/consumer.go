package stream

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/pause"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/wake"
)

// consumer is one named member of a queue's consumer group.
type consumer struct {
	d     *Driver
	queue string
	name  string
	keys  queueKeys
	vt    time.Duration
	vtMS  string // vt in ms, as fetch.lua's ARGV
	// doubts: deliveries whose settle got no answer (see script.Doubts).
	doubts script.Doubts

	mu        sync.Mutex
	closed    bool
	wg        sync.WaitGroup
	cursor    string    // XAUTOCLAIM cursor; "0-0" starts a pass
	nextClaim time.Time // when the next XAUTOCLAIM pass may start
	nextPrune time.Time // when this consumer may next sweep the group (prune.go)
	// held maps the entry ID of each delivery Fetch handed out and that
	// was not settled yet to its token (see lost.go): an entry this
	// consumer took over from its own expired lease is handed out again
	// under the same ID, and only the settle of that later delivery
	// forgets it. heldFull is set once it would have grown past maxHeld.
	held     map[string]string
	heldFull bool
	// lost is set when a read's entries may be in this consumer's pending
	// list, never handed out (see lost.go): why, for the log line of their
	// hand-back ("" when nothing is to hand back).
	lost string

	// reading is read-locked by every read of the group (a fetch round, a
	// blocking read) until the entries it got are held or handed back, so
	// that recoverLost, which write-locks it, sees no entry a read still
	// owns.
	reading sync.RWMutex

	// pause is what the consumer knows of its queue's pause (see paused).
	pause pause.Seen

	// blockHook, when set (by tests), runs just before a blocking read.
	blockHook func()

	// kept: the consumer was opened with broker.ConsumerOptions.Kept. It
	// then sleeps on the queue's wake signals (waiter) instead of blocking
	// in XREADGROUP: {q}:wake, set when entries are added, and {q}:reclaim,
	// set by the keeper (Driver.Upkeep) when leases expired, which makes it
	// run a takeover pass (passDue, under mu). See sleep.
	kept    bool
	passDue bool
	// idle is broker.ConsumerOptions.Idle (a no-op when unset): Fetch calls
	// it before each wait.
	idle func()
	// signalling is set while a background signal (see signal) is sent.
	signalling atomic.Bool
	waiter     *wake.Waiter
	// closing ends when the consumer is closed (cancel): Fetch and a wait
	// return broker.ErrClosed.
	closing context.Context
	cancel  context.CancelFunc
}

// keptBlock is the longest one idle wait of a kept consumer lasts; it then
// waits again without reading. It sets the idle load of a kept consumer:
// one command a minute.
const keptBlock = time.Minute

// reclaimShare: a takeover pass the keeper's reclaim signal asked for takes
// at most 1/reclaimShare of the entries its Fetch asked for, then wakes the
// next consumer (see round).
const reclaimShare = 4

var (
	_ broker.Consumer = (*consumer)(nil)
	_ broker.Sleeper  = (*consumer)(nil)
)

func newConsumer(d *Driver, queue string, opts *broker.ConsumerOptions) *consumer {
	vt := opts.VisibilityTimeoutOrDefault()
	// A lease shorter than a millisecond cannot be expressed in XAUTOCLAIM.
	vt = max(vt, time.Millisecond)
	k := d.keys(queue)
	closing, cancel := context.WithCancel(context.Background())
	idle := func() {}
	if opts != nil && opts.Idle != nil {
		idle = opts.Idle
	}
	return &consumer{
		kept:      opts != nil && opts.Kept,
		idle:      idle,
		waiter:    wake.NewWaiter(d.rdb, k.wake, k.reclaim),
		closing:   closing,
		cancel:    cancel,
		d:         d,
		queue:     queue,
		name:      d.cfg.consumerName(),
		keys:      k,
		vt:        vt,
		vtMS:      strconv.FormatInt(vt.Milliseconds(), 10),
		cursor:    "0-0",
		held:      make(map[string]string),
		nextPrune: time.Now().Add(d.cfg.pruneInterval()),
	}
}

// Close stops the consumer: a blocked Fetch returns broker.ErrClosed and later
// Fetches fail with it. It waits for background reads to end (at most about
// PollInterval), then removes the consumer from the group if it holds no
// pending entry. Deliveries it holds keep their leases and can still be
// settled.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.cancel()
	c.mu.Unlock()

	waited := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-ctx.Done():
		return fmt.Errorf("stream: close: %w", ctx.Err())
	}

	if _, err := closeScript.Run(ctx, c.d.rdb, []string{c.keys.stream}, c.d.cfg.Group, c.name); err != nil {
		return fmt.Errorf("stream: close: %w", err)
	}
	return nil
}

// isClosed reports whether Close was called.
func (c *consumer) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
