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
// partition (see fetch.go for how it fetches). Its deliveries name the
// logical queue; their receipts carry the partition's index ("<k>:<the
// inner receipt>").
type consumer struct {
	d     *Driver
	queue string
	parts []string
	cons  []broker.Consumer
	hooks []atomic.Pointer[func()] // the Idle hook of each partition's Fetch in flight
	idle  func()                   // the caller's ConsumerOptions.Idle
	next  atomic.Uint32            // where the next pass starts

	pass chan struct{} // held by the Fetch that runs a pass (one at a time)

	// The sleeps of parked partitions (fetch.go): stop ends them, wg
	// waits for them.
	stop context.CancelFunc
	wctx context.Context
	wg   sync.WaitGroup

	mu       sync.Mutex
	fetching int           // Fetch calls under way
	parked   []bool        // partition k sleeps
	woken    chan struct{} // closed and replaced when a sleep ends
	closed   bool
}

func (d *Driver) openSharded(ctx context.Context, queue string, ps []string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	var o broker.ConsumerOptions
	if opts != nil {
		o = *opts
	}
	c := &consumer{d: d, queue: queue, parts: ps, cons: make([]broker.Consumer, len(ps)), hooks: make([]atomic.Pointer[func()], len(ps)), idle: o.Idle,
		pass: make(chan struct{}, 1), parked: make([]bool, len(ps)), woken: make(chan struct{})}
	c.wctx, c.stop = context.WithCancel(context.Background())
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
	c.stopSleeps()
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
