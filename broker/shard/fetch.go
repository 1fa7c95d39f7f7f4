package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// How a sharded queue's consumer fetches.
//
// A Fetch runs a pass over the partitions, starting one further at each
// pass so that the partitions take turns, and asks each partition's
// consumer for what it still needs, until it holds max jobs. A partition
// whose consumer finds nothing is parked: its inner Fetch is called off
// before it waits (its Idle hook cancels it, so the call off costs
// nothing), and a goroutine sleeps on the partition instead
// (broker.Sleeper: in Redis, on the partition's own wake signal, leasing
// nothing). Passes skip parked partitions, so an empty partition costs a
// pass nothing; when its sleep ends (a job came) the partition takes its
// turn again. A Fetch that finds every partition parked calls the caller's
// Idle hook and waits until a sleep ends. Nothing is fetched outside a
// Fetch.

// Fetch returns between 1 and max deliveries, taken from the partitions in
// turn, waiting while every partition is empty.
func (c *consumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("conveyor: fetch: max %d is under 1", max)
	}
	c.mu.Lock()
	c.fetching++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.fetching--
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, fmt.Errorf("conveyor: fetch: %w", broker.ErrClosed)
		}
		woken := c.woken
		c.mu.Unlock()
		select {
		case c.pass <- struct{}{}:
		case <-woken:
			continue
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		ds, err := c.runPass(ctx, max)
		<-c.pass
		if len(ds) > 0 || err != nil {
			return ds, err
		}
		// Every partition is parked: they sleep in Redis.
		if c.idle != nil {
			c.idle()
		}
		select {
		case <-woken:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// runPass asks each partition that is not parked for jobs, in turn, until
// it holds max, parking those that have none.
func (c *consumer) runPass(ctx context.Context, max int) ([]*broker.Delivery, error) {
	start := int(c.next.Add(1)) % len(c.parts)
	var out []*broker.Delivery
	for i := range c.parts {
		k := (start + i) % len(c.parts)
		if c.isParked(k) {
			continue
		}
		ds, err := c.try(ctx, k, max-len(out))
		if len(ds) == 0 && err == nil {
			c.park(k)
			continue
		}
		if lastChance(ds) {
			// A job on its last chance runs alone (see
			// broker.Delivery.LastChance).
			if len(out) == 0 {
				return c.outer(k, ds), nil
			}
			c.handBack(c.outer(k, ds))
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
	return out, nil
}

// try fetches from partition k until it returns or says it is empty
// (nil, nil). The inner Fetch calls the partition's Idle hook before it
// would wait, in this goroutine; the hook cancels the Fetch's context, so
// the wait returns at once without sending its command.
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

func (c *consumer) isParked(k int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parked[k]
}

// park makes partition k sleep until it may have jobs
// (broker.Sleeper; a consumer that cannot sleep so is looked at again after
// a second), then lets the passes take it again and wakes the Fetch calls
// that wait.
func (c *consumer) park(k int) {
	c.mu.Lock()
	if c.closed || c.parked[k] {
		c.mu.Unlock()
		return
	}
	c.parked[k] = true
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		s, ok := c.cons[k].(broker.Sleeper)
		var (
			woken bool
			err   error
		)
		if ok {
			woken, err = s.Sleep(c.wctx)
		} else {
			c.pause(time.Second)
		}
		if err != nil && c.wctx.Err() == nil && !errors.Is(err, broker.ErrClosed) {
			// The partition's next Fetch would not show it (its wait is
			// called off before it is sent): say it here, and look again
			// after a second rather than at once.
			c.d.log.Warn("shard: sleeping on an empty partition failed; looking again in a second",
				"queue", c.queue, "partition", c.parts[k], "error", err)
			c.pause(time.Second)
		}
		c.mu.Lock()
		c.parked[k] = false
		attended := c.fetching > 0
		if !c.closed {
			close(c.woken)
			c.woken = make(chan struct{})
		}
		c.mu.Unlock()
		if woken && !attended {
			// No Fetch of this consumer will take what woke it (the
			// caller's workers are busy): give the wake-up back, so that
			// an idle consumer elsewhere takes the job.
			// Its own context: a Close ends wctx, and the wake-up must go
			// back all the same (a push onto waiting jobs signals no one).
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.wctx), 5*time.Second)
			if err := s.Wake(ctx); err != nil {
				c.d.log.Warn("shard: giving back a wake-up failed; the queue's keeper wakes a consumer within a second",
					"queue", c.queue, "partition", c.parts[k], "error", err)
			}
			cancel()
		}
	}()
}

// pause waits d, or until the consumer is closed.
func (c *consumer) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.wctx.Done():
	}
}

// handBack releases deliveries of the logical queue that Fetch will not
// return.
func (c *consumer) handBack(ds []*broker.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Release(ctx, ds...); err != nil {
		c.d.log.Warn("shard: handing back jobs fetched beside a job on its last chance failed; they come back when their leases run out, counted as a recovery",
			"queue", c.queue, "jobs", len(ds), "error", err)
	}
}

// stopSleeps ends the partitions' sleeps and wakes the Fetch calls that
// wait (they return broker.ErrClosed).
func (c *consumer) stopSleeps() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.woken)
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
}
