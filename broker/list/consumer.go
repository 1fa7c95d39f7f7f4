package list

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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

const (
	// maxFetch caps one fetch.lua call; Fetch returns at most this many
	// deliveries whatever max it is given.
	maxFetch = 1000
	// maxBlock is the longest one idle wait lasts, for a consumer that
	// looks for expired leases itself (broker.ConsumerOptions.Kept unset),
	// before it runs fetch.lua again, so that expired leases of which the
	// waiting consumer heard nothing are picked up within it. It sets the
	// idle load of such a consumer: about two commands a second.
	maxBlock = time.Second
	// keptBlock is the longest one idle wait of a kept consumer lasts; it
	// then waits again without fetching. It sets the idle load of a kept
	// consumer: one command a minute.
	keptBlock = time.Minute
)

// consumer is the list driver's broker.Consumer of one queue.
type consumer struct {
	d     *Driver
	queue string
	k     *queueKeys
	vt    time.Duration
	// doubts: deliveries whose settle got no answer (see script.Doubts).
	doubts script.Doubts
	// fetchTail is fetch.lua's ARGV after max, boxed once.
	fetchTail [5]any
	// pause is what the consumer knows of its queue's pause.
	pause pause.Seen
	// name and fetches make each fetch's token "<name>.<fetches>" (see
	// nextToken): name is random, so no two consumers share one.
	name    string
	fetches atomic.Uint64
	// lost holds the tokens of fetches whose reply was lost (see
	// lostFetch).
	lost lostFetches
	// kept: a keeper hands back the queue's expired leases
	// (broker.ConsumerOptions.Kept), so an idle wait lasts keptBlock.
	kept bool
	// waiter sleeps on the queue's wake signal (internal/wake).
	waiter *wake.Waiter
	// drained: the last fetch emptied ready, so the next Fetch waits for
	// the wake signal before it looks (a message stored since has set it).
	drained atomic.Bool
	// idle is broker.ConsumerOptions.Idle (a no-op when unset): Fetch calls
	// it before each wait.
	idle func()

	// mu orders Close after every wait has registered in waits, so that
	// Close can wait for them all (sync.WaitGroup forbids Add racing Wait).
	mu     sync.Mutex
	closed bool
	waits  sync.WaitGroup
	// closing ends when the consumer is closed (close): it cuts a wait
	// short.
	closing context.Context
	close   context.CancelFunc
}

var (
	_ broker.Consumer = (*consumer)(nil)
	_ broker.Sleeper  = (*consumer)(nil)
)

func newConsumer(d *Driver, queue string, opts *broker.ConsumerOptions) *consumer {
	vt := opts.VisibilityTimeoutOrDefault()
	k := d.keys(queue)
	closing, closeFn := context.WithCancel(context.Background())
	idle := func() {}
	if opts != nil && opts.Idle != nil {
		idle = opts.Idle
	}
	return &consumer{
		d:       d,
		queue:   queue,
		k:       k,
		vt:      vt,
		kept:    opts != nil && opts.Kept,
		idle:    idle,
		waiter:  wake.NewWaiter(d.client, k.wake),
		closing: closing,
		close:   closeFn,
		fetchTail: [5]any{
			vt.Milliseconds(), d.cfg.ReapBatch, d.cfg.DiscardMax, d.cfg.MaxRecoveries, d.Keeper.Retention.AgeArg(),
		},
		name: randomName(),
	}
}

// randomName returns a consumer's part of its fetch tokens: 240 random
// bits in hex, 60 characters. The length is on purpose: it makes every
// receipt longer than 64 bytes, Redis's zset-max-listpack-value and
// hash-max-listpack-value, so the lease ZSET and the inflight HASH are a
// skiplist and a hash table from their first entry. A listpack finds and
// inserts by a scan: with 100 leases in flight a fetch and an ack of 50
// jobs cost 150-175 us of ZADD and ZREM on a listpack against 45 us on a
// skiplist (Redis 7.0).
func randomName() string {
	var b [30]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// nextToken returns the token of a new fetch, "<name>.<n>" (n in base 36):
// made here rather than by Redis, so that it is new even when a failover
// made Redis forget the fetches before it, and the receipts it names (see
// lib.lua) fence off every earlier delivery.
func (c *consumer) nextToken() string {
	return c.name + "." + strconv.FormatUint(c.fetches.Add(1), 36)
}

// Fetch leases between 1 and max deliveries (at most 1000 per call). When
// the queue has nothing ready it sleeps in Redis on the queue's wake
// signal (internal/wake: a message stored wakes one idle consumer, not all)
// and looks again when woken; without it, after at most a second or at the
// next lease deadline when it looks for expired leases itself, after a
// minute (broker.ConsumerOptions.Kept) when a keeper does. After a fetch
// that emptied the queue it waits for the signal before it looks again.
// Before each wait, and before each wait on a paused queue, it calls
// broker.ConsumerOptions.Idle. It returns ctx.Err() as soon as ctx is done,
// and broker.ErrClosed once the consumer is closed.
func (c *consumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("list: fetch: max %d is under 1", max)
	}
	if max > maxFetch {
		max = maxFetch
	}
	// woken: the last wait took the queue's wake-up and no fetch has
	// looked since. A Fetch that returns so (closed, or ctx done) gives it
	// back, so that another idle consumer takes the jobs that sent it:
	// pushes onto waiting jobs signal no one (see Driver.Enqueue).
	woken := false
	defer func() {
		if woken {
			c.giveBack()
		}
	}()
	for {
		if c.isClosed() {
			return nil, broker.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if held, err := c.pause.Hold(ctx, c.d.client, c.k.paused, c.closing.Done(), c.idle); err != nil {
			if errors.Is(err, ctx.Err()) || errors.Is(err, broker.ErrClosed) {
				return nil, err // as a wait returns them
			}
			return nil, fmt.Errorf("list: fetch: %w", err)
		} else if held {
			// Paused when last asked: fetch nothing until it is not, then
			// look, as wake-ups may have come meanwhile.
			c.drained.Store(false)
			continue
		}
		hint := time.Duration(-1)
		if !c.drained.Load() {
			woken = false // the fetch passes the signal on (fetch.lua)
			ds, h, err := c.fetchOnce(ctx, max)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("list: fetch: %w", err)
			}
			if len(ds) > 0 {
				if c.pausedAfterFetch(ctx, ds) {
					continue
				}
				return ds, nil
			}
			hint = h
		}
		c.idle()
		woke, err := c.wait(ctx, hint)
		if err != nil {
			return nil, err
		}
		woken = woke
		// Look when woken, and when the wait ran out unless a keeper hands
		// back expired leases.
		c.drained.Store(!woke && c.kept)
	}
}

// Sleep implements broker.Sleeper: it waits on the queue's wake signal
// (kept: until it comes; otherwise for at most a second, after which its
// own Fetch would look for expired leases), or PauseLag while the queue is
// known to be paused, and makes the next Fetch look at once.
func (c *consumer) Sleep(ctx context.Context) (bool, error) {
	defer c.drained.Store(false)
	if c.pause.Known() {
		return false, pause.Wait(ctx, c.closing.Done())
	}
	for {
		woke, err := c.wait(ctx, -1)
		if err != nil || woke || !c.kept {
			return woke && err == nil, err
		}
	}
}

// Wake implements broker.Sleeper: it sets the queue's wake signal while
// ready holds jobs.
func (c *consumer) Wake(ctx context.Context) error {
	if err := wake.SignalIf(ctx, c.d.client, c.k.ready, c.k.wake); err != nil {
		return fmt.Errorf("list: wake: %w", err)
	}
	return nil
}

// giveBack gives back a wake-up no fetch of this consumer will use (Wake),
// with a context of its own: the caller's has ended.
func (c *consumer) giveBack() {
	ctx, cancel := context.WithTimeout(context.Background(), signalTimeout)
	defer cancel()
	if err := c.Wake(ctx); err != nil {
		c.d.log.Warn("list: giving back a wake-up failed; the queue's keeper wakes a consumer within a second",
			"queue", c.queue, "error", err)
	}
}

// wait sleeps on the wake signal for at most keptBlock when kept, else for
// at most hint (a negative hint: maxBlock), or until ctx is done or the
// consumer is closed, and reports whether the signal woke it.
func (c *consumer) wait(ctx context.Context, hint time.Duration) (bool, error) {
	d := keptBlock
	if !c.kept {
		d = maxBlock
		if hint >= 0 && hint < d {
			d = hint
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false, broker.ErrClosed
	}
	c.waits.Add(1)
	c.mu.Unlock()
	defer c.waits.Done()

	key, err := c.waiter.WaitOpen(ctx, c.closing, d)
	if err != nil && err != ctx.Err() && !errors.Is(err, broker.ErrClosed) {
		err = fmt.Errorf("list: fetch: %w", err)
	}
	return key == c.waiter.Key(), err
}

// pausedAfterFetch hands ds back (a release: to the front of ready, in
// order) and reports true when the queue is paused. A consumer asks only
// when a fetch returned messages, at most once per broker.PauseLag (see
// pause.Seen), so an idle consumer sends nothing for pauses.
func (c *consumer) pausedAfterFetch(ctx context.Context, ds []*broker.Delivery) bool {
	p, err := c.Paused(ctx)
	if err != nil || !p {
		return false // Redis did not say: the messages were fetched in good faith
	}
	if err := c.Release(ctx, ds...); err != nil {
		// Their leases bring back those not released.
		c.d.log.WarnContext(ctx, "list: handing back messages fetched from a paused queue failed", "queue", c.queue, "error", err)
	}
	return true
}

// Paused reports whether the queue is paused, asking Redis at most once per
// broker.PauseLag (broker.PauseWatcher); the answer is shared with Fetch.
func (c *consumer) Paused(ctx context.Context) (bool, error) {
	return c.pause.Paused(ctx, c.d.client, c.k.paused)
}

func (c *consumer) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close stops the consumer: a Fetch that is waiting returns
// broker.ErrClosed, later ones too. Close ends the blocking command of a
// wait at once (see internal/wake) and waits, until ctx is done, for it to
// return, so that no goroutine of the consumer outlives it. A fetch whose reply was
// lost and whose batch is not handed back yet is handed back first (see
// lostFetch). Deliveries keep their
// leases, and the settle methods keep working after Close so that a worker
// pool can finish and settle what it holds.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.close()
	}
	c.mu.Unlock()
	c.handBackLost(ctx)
	ended := make(chan struct{})
	go func() {
		c.waits.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("list: close: %w", ctx.Err())
	}
}
