// Package groupcommit lets many goroutines share a few round trips: a call
// that finds a free slot sends at once, taking along the calls that are
// waiting; a call that finds every slot busy waits and goes out with the next
// round trip. No call waits on a timer, so a lone caller pays one round trip
// and nothing more, while concurrent callers get batches for free.
//
// The client's Enqueue and the pool's acks use it.
package groupcommit

import "context"

// Committer batches calls of Do into calls of send.
type Committer[T any] struct {
	slots chan struct{}
	queue chan *call[T]
	max   int
	send  func(ctx context.Context, items []T) []error
}

type call[T any] struct {
	item T
	done chan error
}

// New returns a committer that has at most slots sends in flight, puts at
// most max items in one send, and sends with send, which returns one error
// (nil for success) per item.
func New[T any](slots, max int, send func(ctx context.Context, items []T) []error) *Committer[T] {
	return &Committer[T]{
		slots: make(chan struct{}, slots),
		queue: make(chan *call[T], 4*max),
		max:   max,
		send:  send,
	}
}

// Do sends item, alone or with others, and returns its outcome. If ctx ends
// while the item waits, Do returns ctx.Err() and the item may still be sent.
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
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		return err
	case c.slots <- struct{}{}:
		c.drainAndRelease()
		return <-p.done // sent by this drain or by another holder's
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Committer[T]) lead(ctx context.Context, item T) error {
	waiting := c.take(1)
	var err error
	if len(waiting) == 0 {
		err = c.send(ctx, []T{item})[0]
	} else {
		own := &call[T]{item: item, done: make(chan error, 1)}
		// The others must not fail because the leader's context ends.
		c.flush(context.WithoutCancel(ctx), append(waiting, own))
		err = <-own.done
	}
	c.drainAndRelease()
	return err
}

func (c *Committer[T]) drainAndRelease() {
	for {
		batch := c.take(0)
		if len(batch) == 0 {
			break
		}
		c.flush(context.Background(), batch)
	}
	<-c.slots
}

func (c *Committer[T]) take(have int) []*call[T] {
	var batch []*call[T]
	for have < c.max {
		select {
		case p := <-c.queue:
			batch = append(batch, p)
			have++
		default:
			return batch
		}
	}
	return batch
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
