// Package groupcommit lets many goroutines share a few round trips: a call
// that finds no round trip in flight sends at once, taking along the calls
// that are waiting; other calls wait and go out with the next round trip. No
// call waits on a timer, so a lone caller pays one round trip and nothing
// more, while concurrent callers get batches for free.
//
// A second (third...) round trip starts beside one in flight only for a
// batch of at least extra's weight (New's argument): a round trip costs both ends system
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
	"errors"
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
	queue    []*call[T] // waiting calls, oldest first (some maybe abandoned); no leader's own
	weight   int        // of the calls in queue
	inFlight int        // leaders: callers sending, or handed the next send
}

type call[T any] struct {
	item T
	done chan error
	// state moves from waiting to taken (a leader sends it), abandoned
	// (its caller gave up first, so it is never sent) or leading (its
	// caller is to lead the next send).
	state atomic.Int32
}

const (
	waiting   int32 = iota
	taken           // in a batch: its outcome follows
	abandoned       // its caller gave up: never sent
	leading         // its caller leads the next send (handOver)
)

// New returns a committer that has at most slots sends in flight, starts
// a send beside others only for waiting items of a total size of at least
// extra, puts items of a total size of at most max in one send (an item
// bigger than max goes alone), and sends with send, which returns one error
// (nil for success) per item. size weighs an item; nil counts each item as
// 1.
func New[T any](slots, extra, max int, size func(T) int, send func(ctx context.Context, items []T) []error) *Committer[T] {
	if size == nil {
		size = func(T) int { return 1 }
	}
	return &Committer[T]{slots: max1(slots), extra: max1(extra), max: max1(max), size: size, send: send}
}

func max1(n int) int { return max(n, 1) }

// errLead, handed to a waiting call through its done channel, makes its
// caller the leader of the next send (see handOver).
var errLead = errors.New("groupcommit: lead")

// Do sends item, alone or with others, and returns its outcome. If ctx ends
// while the item waits, Do returns ctx.Err() and the item is never sent; if
// it ends once the item is on its way, Do waits for the outcome (one round
// trip), so that an error from Do never hides a send. A caller that leads a
// send carries its own item in it: Do returns after one round trip of its
// own, at most, plus its wait in the queue.
func (c *Committer[T]) Do(ctx context.Context, item T) error {
	n := c.size(item)
	c.mu.Lock()
	if c.inFlight == 0 { // then nothing waits either (see handOver)
		if err := ctx.Err(); err != nil {
			c.mu.Unlock()
			return err // never sent
		}
		// A lone caller: its item alone, with no call to allocate.
		c.inFlight++
		c.mu.Unlock()
		err := c.send(ctx, []T{item})[0]
		c.handOver()
		return err
	}
	own := &call[T]{item: item, done: make(chan error, 1)}
	if c.inFlight < c.slots && c.weight+n >= c.extra {
		c.inFlight++
		c.mu.Unlock()
		return c.lead(ctx, own)
	}
	c.queue = append(c.queue, own)
	c.weight += n
	c.mu.Unlock()
	var err error
	select {
	case err = <-own.done:
	case <-ctx.Done():
		if own.state.CompareAndSwap(waiting, abandoned) {
			return ctx.Err()
		}
		err = <-own.done // a leader took it (its outcome follows) or handed over
	}
	if err == errLead {
		return c.lead(ctx, own)
	}
	return err
}

// lead sends own (unless its caller gave up meanwhile) with the calls at
// the front of the queue, up to max, then hands over, and returns own's
// outcome.
func (c *Committer[T]) lead(ctx context.Context, own *call[T]) error {
	var batch []*call[T]
	have := 0
	gaveUp := ctx.Err() // handed the lead after its caller's context ended
	if gaveUp == nil {
		batch, have = []*call[T]{own}, c.size(own.item)
	}
	c.mu.Lock()
	batch = c.take(batch, have)
	c.mu.Unlock()
	if len(batch) > 0 {
		sendCtx := ctx
		if gaveUp != nil || len(batch) > 1 {
			// The others must not fail because the leader's context ends.
			sendCtx = context.WithoutCancel(ctx)
		}
		c.flush(sendCtx, batch)
	}
	c.handOver()
	if gaveUp != nil {
		return gaveUp
	}
	return <-own.done
}

// handOver ends a leader's turn. What waits goes out with the next send:
// with other sends in flight, a batch too small for a send of its own is
// left to them; otherwise the oldest waiting call is made the next leader,
// so that no caller stays in Do sending for others who keep arriving. The
// last send in flight therefore always hands over what waits: no call is
// left waiting with no send to come.
func (c *Committer[T]) handOver() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight > 1 && c.weight < c.extra {
		c.inFlight--
		return
	}
	for len(c.queue) > 0 {
		p := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.weight -= c.size(p.item)
		if p.state.CompareAndSwap(waiting, leading) {
			p.done <- errLead // the in-flight count passes to it
			return
		}
	}
	c.inFlight--
}

// take appends waiting calls from the front of the queue to batch, whose
// size is have so far, while it stays within max (the first one always
// goes, however big); c.mu is held.
func (c *Committer[T]) take(batch []*call[T], have int) []*call[T] {
	i := 0
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
	k := copy(c.queue, c.queue[i:])
	clear(c.queue[k:])
	c.queue = c.queue[:k]
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
