// Package groupcommit lets many goroutines share a few round trips: a call
// that finds no round trip in flight sends at once, taking along the calls
// that are waiting; other calls wait and go out with the next round trip. No
// call waits on a timer, so a lone caller pays one round trip and nothing
// more, while concurrent callers get batches for free.
//
// A second (third...) round trip starts beside one in flight only for a
// batch of at least Extra's weight: a round trip costs both ends system
// calls and a command of its own, so small concurrent ones cost more than
// they save. On the 2-vCPU development machine, 50 goroutines enqueueing
// on the list driver moved about 76,000 jobs/s with up to 8 round trips in
// flight taken by whoever came first (batches of ~3), and about twice that
// with one in flight (batches of ~50); the stream driver, whose batch is a
// script that keeps Redis busy longer, gained from a second and third round
// trip of big batches (see docs/performance.md).
//
// The client's Enqueue and the pool's acks use it.
package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
)

// Committer batches calls of Do into calls of send.
type Committer[T any] struct {
	slots int
	extra int
	max   int
	size  func(T) int
	send  func(ctx context.Context, items []T) []error

	mu       sync.Mutex
	queue    []*call[T] // waiting calls, oldest first (some maybe abandoned)
	weight   int        // of the calls in queue
	inFlight int        // sends under way, one per leading caller
}

type call[T any] struct {
	item T
	done chan error
	// state moves from waiting to taken (a leader sends it) or abandoned
	// (its caller gave up first, so it is never sent).
	state atomic.Int32
}

const (
	waiting int32 = iota
	taken
	abandoned
)

// New returns a committer that has at most slots sends in flight, starts
// a send beside others only for waiting items of a total size of at least
// extra (one send in flight when extra exceeds max), puts items of a total
// size of at most max in one send (an item bigger than max goes alone), and
// sends with send, which returns one error (nil for success) per item. size
// weighs an item; nil counts each item as 1.
func New[T any](slots, extra, max int, size func(T) int, send func(ctx context.Context, items []T) []error) *Committer[T] {
	if size == nil {
		size = func(T) int { return 1 }
	}
	return &Committer[T]{slots: max1(slots), extra: max1(extra), max: max1(max), size: size, send: send}
}

func max1(n int) int { return max(n, 1) }

// Do sends item, alone or with others, and returns its outcome. If ctx ends
// while the item waits, Do returns ctx.Err() and the item is never sent; if
// it ends once the item is on its way, Do waits for the outcome (one round
// trip), so that an error from Do never hides a send.
func (c *Committer[T]) Do(ctx context.Context, item T) error {
	own := &call[T]{item: item, done: make(chan error, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, own)
	c.weight += c.size(item)
	if c.mayLead() {
		c.inFlight++
		c.mu.Unlock()
		c.lead(ctx, own)
		return <-own.done
	}
	c.mu.Unlock()
	select {
	case err := <-own.done:
		return err
	case <-ctx.Done():
		if own.state.CompareAndSwap(waiting, abandoned) {
			return ctx.Err()
		}
		return <-own.done // a leader took it: its outcome follows
	}
}

// mayLead reports whether a caller may start a send now; c.mu is held.
func (c *Committer[T]) mayLead() bool {
	return c.inFlight == 0 || (c.inFlight < c.slots && c.weight >= c.extra)
}

// lead sends batches of waiting calls, own among them, until own is sent
// and either nothing waits or the rest can be left to the other sends in
// flight (too little waits for a send of its own). The last send in
// flight always takes everything, so no call is left waiting with no send
// to come.
func (c *Committer[T]) lead(ctx context.Context, own *call[T]) {
	for {
		c.mu.Lock()
		if own.state.Load() != waiting && (len(c.queue) == 0 || (c.inFlight > 1 && c.weight < c.extra)) {
			c.inFlight--
			c.mu.Unlock()
			return
		}
		batch := c.take()
		c.mu.Unlock()
		if len(batch) == 0 {
			continue // all abandoned; look again
		}
		sendCtx := ctx
		if len(batch) > 1 || batch[0] != own {
			// The others must not fail because the leader's context ends.
			sendCtx = context.WithoutCancel(ctx)
		}
		c.flush(sendCtx, batch)
	}
}

// take removes waiting calls from the front of the queue while the batch
// stays within max (the first one always goes, however big); c.mu is held.
func (c *Committer[T]) take() []*call[T] {
	var batch []*call[T]
	have, i := 0, 0
	for ; i < len(c.queue); i++ {
		p := c.queue[i]
		n := c.size(p.item)
		if p.state.Load() == abandoned {
			c.weight -= n
			continue
		}
		if have > 0 && have+n > c.max {
			break
		}
		if !p.state.CompareAndSwap(waiting, taken) {
			c.weight -= n // abandoned since the check above
			continue
		}
		batch = append(batch, p)
		have += n
		c.weight -= n
	}
	n := copy(c.queue, c.queue[i:])
	clear(c.queue[n:])
	c.queue = c.queue[:n]
	return batch
}

// flush sends a batch and hands each call its outcome.
func (c *Committer[T]) flush(ctx context.Context, batch []*call[T]) {
	items := make([]T, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	errs := c.send(ctx, items)
	for i, p := range batch {
		p.done <- errs[i]
	}
}
