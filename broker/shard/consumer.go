package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/errlist"
)

// consumer is the consumer of a sharded queue: one inner consumer per
// partition. It fetches nothing ahead: a Fetch asks the partitions one
// after the other, from a starting point that moves on at each call (so
// the partitions take turns), until it holds max jobs or has asked them
// all. A
// partition is passed over as soon as its inner Fetch says it found
// nothing and is about to wait (broker.ConsumerOptions.Idle); its wait is
// then called off, which costs one command. When every partition is empty
// the Fetch waits on all of them at once, each in its own Redis wait, and
// returns the jobs of the first that has some; another that returns jobs
// in the same instant hands them straight back (a release: no attempt is
// counted).
//
// Its deliveries name the logical queue; their receipts carry the
// partition's index ("<k>:<the inner receipt>").
type consumer struct {
	d     *Driver
	queue string
	parts []string
	cons  []broker.Consumer
	hooks []atomic.Pointer[func()] // the Idle hook of each partition's Fetch in flight
	idle  func()                   // the caller's ConsumerOptions.Idle
	next  atomic.Uint32            // where the next Fetch starts
}

func (d *Driver) openSharded(ctx context.Context, queue string, ps []string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	var o broker.ConsumerOptions
	if opts != nil {
		o = *opts
	}
	c := &consumer{d: d, queue: queue, parts: ps, cons: make([]broker.Consumer, len(ps)), hooks: make([]atomic.Pointer[func()], len(ps)), idle: o.Idle}
	for k, p := range ps {
		po := o
		po.Idle = func() {
			if f := c.hooks[k].Load(); f != nil {
				(*f)()
			}
		}
		ic, err := d.d.Open(ctx, p, &po)
		if err != nil {
			_ = c.Close(ctx)
			return nil, fmt.Errorf("open partition %s: %w", p, err)
		}
		c.cons[k] = ic
	}
	return c, nil
}

// fetched is what one partition's Fetch returned.
type fetched struct {
	k   int
	ds  []*broker.Delivery
	err error
}

// Fetch returns between 1 and max deliveries, taken from the partitions in
// turn, waiting while every partition is empty.
func (c *consumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("conveyor: fetch: max %d is under 1", max)
	}
	start := int(c.next.Add(1)) % len(c.parts)
	var out []*broker.Delivery
	for i := range c.parts {
		k := (start + i) % len(c.parts)
		ds, err := c.try(ctx, k, max-len(out))
		if lastChance(ds) {
			// A job on its last chance runs alone (see
			// broker.Delivery.LastChance).
			if len(out) == 0 {
				return c.outer(k, ds), nil
			}
			c.handBack(fetched{k, ds, nil})
			return out, nil
		}
		out = append(out, c.outer(k, ds)...)
		if err != nil && len(out) == 0 {
			return nil, err
		}
		if len(out) == max || err != nil {
			return out, nil
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if c.idle != nil {
		c.idle()
	}
	return c.waitAll(ctx, max)
}

// try fetches from partition k until it returns or says it is empty. The
// inner Fetch calls the partition's Idle hook before it would wait, in
// this goroutine; the hook cancels the Fetch's context, so the wait returns
// at once without sending its command.
func (c *consumer) try(ctx context.Context, k, max int) ([]*broker.Delivery, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	empty := false
	hook := func() { empty = true; cancel() }
	c.hooks[k].Store(&hook)
	ds, err := c.cons[k].Fetch(fctx, max)
	c.hooks[k].Store(nil)
	switch {
	case len(ds) > 0:
		return ds, nil
	case empty && ctx.Err() == nil && errors.Is(err, context.Canceled):
		return nil, nil
	case empty && ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return ds, err
}

// waitAll fetches from every partition at once and returns the first
// partition's deliveries; what others return meanwhile goes back.
func (c *consumer) waitAll(ctx context.Context, max int) ([]*broker.Delivery, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan fetched, len(c.parts))
	for k := range c.parts {
		go func() {
			ds, err := c.cons[k].Fetch(fctx, max)
			res <- fetched{k, ds, err}
		}()
	}
	var won fetched
	var errs error
	for range c.parts {
		r := <-res
		ours := fctx.Err() != nil && ctx.Err() == nil && errors.Is(r.err, context.Canceled) // we called it off
		switch {
		case len(r.ds) > 0 && won.ds == nil:
			won = r
			cancel()
		case len(r.ds) > 0:
			c.handBack(r)
		case r.err != nil && !ours && errs == nil:
			errs = r.err
			cancel()
		}
	}
	if won.ds != nil {
		return c.outer(won.k, won.ds), nil
	}
	if errs == nil {
		errs = ctx.Err()
	}
	return nil, errs
}

// handBack releases deliveries a partition returned after another one won.
func (c *consumer) handBack(r fetched) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.cons[r.k].Release(ctx, r.ds...); err != nil {
		c.d.log.Warn("shard: handing back jobs fetched by a wait that lost its race failed; their leases bring them back",
			"queue", c.parts[r.k], "jobs", len(r.ds), "error", err)
	}
}

// outer makes ds, of partition k, deliveries of the logical queue.
func (c *consumer) outer(k int, ds []*broker.Delivery) []*broker.Delivery {
	for _, d := range ds {
		d.Queue = c.queue
		d.Receipt = strconv.Itoa(k) + ":" + d.Receipt
	}
	return ds
}

// inner returns the inner driver's view of d, and its partition's index.
func (c *consumer) inner(d *broker.Delivery) (*broker.Delivery, int, error) {
	ks, rest, ok := strings.Cut(d.Receipt, ":")
	k, err := strconv.Atoi(ks)
	if !ok || err != nil || k < 0 || k >= len(c.parts) || d.Queue != c.queue {
		return nil, 0, fmt.Errorf("conveyor: job %s: not a delivery of queue %q's consumer", d.ID, c.queue)
	}
	in := *d
	in.Queue = c.parts[k]
	in.Receipt = rest
	return &in, k, nil
}

// copyBack copies what a settle changed on in (a lease deadline) to d.
func copyBack(d, in *broker.Delivery) {
	q, r := d.Queue, d.Receipt
	*d = *in
	d.Queue, d.Receipt = q, r
}

// settle runs f on the inner view of ds, partition by partition, and
// copies what f changed back to ds, with errors naming ds.
func (c *consumer) settle(ds []*broker.Delivery, f func(ic broker.Consumer, ins []*broker.Delivery) error) error {
	byPart := make(map[int][]*broker.Delivery, 1)
	outer := make(map[*broker.Delivery]*broker.Delivery, len(ds))
	var errs *multierror.Error
	for _, d := range ds {
		in, k, err := c.inner(d)
		if err != nil {
			errs = multierror.Append(errs, &broker.DeliveryError{Delivery: d, Err: err})
			continue
		}
		byPart[k] = append(byPart[k], in)
		outer[in] = d
	}
	// The partitions' settles go out at once: on a Cluster they are
	// different masters, and a pool waits for its batch of acks.
	results := make(map[int]error, len(byPart))
	if len(byPart) == 1 {
		for k, ins := range byPart {
			results[k] = f(c.cons[k], ins)
		}
	} else {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for k, ins := range byPart {
			wg.Go(func() {
				err := f(c.cons[k], ins)
				mu.Lock()
				results[k] = err
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	for k, ins := range byPart {
		err := results[k]
		for _, in := range ins {
			copyBack(outer[in], in)
		}
		if err == nil {
			continue
		}
		named := false
		for _, e := range errlist.Split(err) {
			var de *broker.DeliveryError
			if errors.As(e, &de) {
				if d := outer[de.Delivery]; d != nil {
					de.Delivery = d
				}
				errs = multierror.Append(errs, de)
				named = true
			}
		}
		if !named {
			for _, in := range ins {
				errs = multierror.Append(errs, &broker.DeliveryError{Delivery: outer[in], Err: err})
			}
		}
	}
	return errs.ErrorOrNil()
}

func (c *consumer) Ack(ctx context.Context, ds ...*broker.Delivery) error {
	return c.settle(ds, func(ic broker.Consumer, ins []*broker.Delivery) error { return ic.Ack(ctx, ins...) })
}

func (c *consumer) Release(ctx context.Context, ds ...*broker.Delivery) error {
	return c.settle(ds, func(ic broker.Consumer, ins []*broker.Delivery) error { return ic.Release(ctx, ins...) })
}

func (c *consumer) Extend(ctx context.Context, ttl time.Duration, ds ...*broker.Delivery) error {
	return c.settle(ds, func(ic broker.Consumer, ins []*broker.Delivery) error { return ic.Extend(ctx, ttl, ins...) })
}

// one settles a single delivery, returning the inner error as it is.
func (c *consumer) one(d *broker.Delivery, f func(ic broker.Consumer, in *broker.Delivery) error) error {
	in, k, err := c.inner(d)
	if err != nil {
		return err
	}
	err = f(c.cons[k], in)
	copyBack(d, in)
	var de *broker.DeliveryError
	if errors.As(err, &de) && de.Delivery == in {
		de.Delivery = d
	}
	return err
}

func (c *consumer) Retry(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return c.one(d, func(ic broker.Consumer, in *broker.Delivery) error { return ic.Retry(ctx, in, at) })
}

func (c *consumer) Postpone(ctx context.Context, d *broker.Delivery, at time.Time) error {
	return c.one(d, func(ic broker.Consumer, in *broker.Delivery) error { return ic.Postpone(ctx, in, at) })
}

func (c *consumer) Discard(ctx context.Context, d *broker.Delivery, reason string) error {
	return c.one(d, func(ic broker.Consumer, in *broker.Delivery) error { return ic.Discard(ctx, in, reason) })
}

// Paused reports whether any partition is paused (PauseQueue pauses them
// all).
func (c *consumer) Paused(ctx context.Context) (bool, error) {
	for _, ic := range c.cons {
		pw, ok := ic.(broker.PauseWatcher)
		if !ok {
			return false, nil
		}
		paused, err := pw.Paused(ctx)
		if err != nil || paused {
			return paused, err
		}
	}
	return false, nil
}

// Close closes every partition's consumer: a Fetch in flight returns
// broker.ErrClosed.
func (c *consumer) Close(ctx context.Context) error {
	var errs *multierror.Error
	for k, ic := range c.cons {
		if ic == nil {
			continue
		}
		if err := ic.Close(ctx); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("partition %s: %w", c.parts[k], err))
		}
	}
	return errs.ErrorOrNil()
}

var (
	_ broker.Consumer     = (*consumer)(nil)
	_ broker.PauseWatcher = (*consumer)(nil)
)

// lastChance reports whether ds holds a delivery on its last chance.
func lastChance(ds []*broker.Delivery) bool {
	for _, d := range ds {
		if d.LastChance {
			return true
		}
	}
	return false
}
