// Package groupcommit lets many goroutines share a few round trips: a call
// that finds a free slot sends at once, taking along the calls that are
// waiting; a call that finds every slot busy waits and goes out with the next
// round trip. No call waits on a timer, so a lone caller pays one round trip
// and nothing more, while concurrent callers get batches for free.
//
// The client's Enqueue and the pool's acks use it.
package groupcommit

import (
	"context"
	"sync/atomic"
)

// Committer batches calls of Do into calls of send.
type Committer[T any] struct {
	slots chan struct{}
	queue chan *call[T]
	max   int
	size  func(T) int
	send  func(ctx context.Context, items []T) []error
}

type call[T any] struct {
	item T
	done chan error
	// state moves from waiting to taken (a holder sends it) or abandoned
	// (its caller gave up first, so it is never sent).
	state atomic.Int32
}

const (
	waiting int32 = iota
	taken
	abandoned
)

// New returns a committer that has at most slots sends in flight, puts
// items of a total size of at most max in one send (an item bigger than max
// goes alone), and sends with send, which returns one error (nil for
// success) per item. size weighs an item; nil counts each item as 1.
func New[T any](slots, max int, size func(T) int, send func(ctx context.Context, items []T) []error) *Committer[T] {
	if size == nil {
		size = func(T) int { return 1 }
	}
	return &Committer[T]{
		slots: make(chan struct{}, slots),
		queue: make(chan *call[T], 4*max),
		max:   max,
		size:  size,
		send:  send,
	}
}

// Do sends item, alone or with others, and returns its outcome. If ctx ends
// while the item waits, Do returns ctx.Err() and the item is never sent; if
// it ends once the item is on its way, Do waits for the outcome (one round
// trip), so that an error from Do never hides a send.
func (c *Committer[T]) Do(ctx context.Context, item T) error {
	select {
	case c.slots <- struct{}{}:
		return c.lead(ctx, item)
	default:
	}
	p := &call[T]{item: item, done: make(chan error, 1)}
	select {
	case c.queue <- p:
	case c.slots <- struct{}{}:
		return c.lead(ctx, item)
	case <-ctx.Done():
		return ctx.Err() // never queued
	}
	select {
	case err := <-p.done:
		return err
	case c.slots <- struct{}{}:
		c.drainAndRelease(nil)
		return <-p.done // sent by this drain or by another holder's
	case <-ctx.Done():
		if p.state.CompareAndSwap(waiting, abandoned) {
			return ctx.Err()
		}
		return <-p.done
	}
}

func (c *Committer[T]) lead(ctx context.Context, item T) error {
	waiting, carry := c.take(c.size(item))
	var err error
	if len(waiting) == 0 {
		err = c.send(ctx, []T{item})[0]
	} else {
		own := &call[T]{item: item, done: make(chan error, 1)}
		// The others must not fail because the leader's context ends.
		c.flush(context.WithoutCancel(ctx), append(waiting, own))
		err = <-own.done
	}
	c.drainAndRelease(carry)
	return err
}

// drainAndRelease sends carry and whatever waits, until the queue is empty,
// then frees the holder's slot.
func (c *Committer[T]) drainAndRelease(carry *call[T]) {
	for {
		var batch []*call[T]
		have := 0
		if carry != nil {
			batch, have = []*call[T]{carry}, c.size(carry.item)
		}
		more, next := c.take(have)
		batch, carry = append(batch, more...), next
		if len(batch) == 0 {
			break
		}
		c.flush(context.Background(), batch)
	}
	<-c.slots
}

// take removes waiting calls from the queue while the batch, whose size is
// have so far, stays within max. The call that would overflow it is
// returned as carry, to start the next batch.
func (c *Committer[T]) take(have int) (batch []*call[T], carry *call[T]) {
	for have < c.max {
		select {
		case p := <-c.queue:
			if !p.state.CompareAndSwap(waiting, taken) {
				continue // its caller gave up
			}
			n := c.size(p.item)
			if have > 0 && have+n > c.max {
				return batch, p
			}
			batch = append(batch, p)
			have += n
		default:
			return batch, nil
		}
	}
	return batch, nil
}

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
