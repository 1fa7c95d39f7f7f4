package pubsub

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
)

// Consumer receives the messages published on one queue's channel while it
// is subscribed. It is safe for concurrent use.
type Consumer struct {
	queue   string
	channel string
	sharded bool
	ps      *redis.PubSub
	items   <-chan any
	log     *slog.Logger
	// idle is broker.ConsumerOptions.Idle (a no-op when unset): Fetch calls
	// it before it waits for a message.
	idle func()

	malformed atomic.Uint64

	closeOnce sync.Once
	done      chan struct{}
}

var _ broker.Consumer = (*Consumer)(nil)

func newConsumer(d *Driver, queue, channel string, ps *redis.PubSub, items <-chan any, idle func()) *Consumer {
	if idle == nil {
		idle = func() {}
	}
	return &Consumer{
		queue: queue, channel: channel, sharded: d.sharded, ps: ps, items: items,
		log:  d.log.With("queue", queue),
		idle: idle,
		done: make(chan struct{}),
	}
}

// Fetch waits for the first message, then takes whatever else is already
// buffered, up to max, without waiting again. When nothing is buffered it
// calls broker.ConsumerOptions.Idle before it waits.
func (c *Consumer) Fetch(ctx context.Context, max int) ([]*broker.Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("pubsub: fetch: max %d, want at least 1", max)
	}
	select {
	case <-c.done:
		return nil, fmt.Errorf("pubsub: fetch: %w", broker.ErrClosed)
	default:
	}
	var out []*broker.Delivery
	for len(out) == 0 {
		var item any
		var ok bool
		select {
		case <-ctx.Done():
			return nil, ctx.Err() // unwrapped, as broker.Consumer promises
		case <-c.done:
			return nil, fmt.Errorf("pubsub: fetch: %w", broker.ErrClosed)
		case item, ok = <-c.items:
		default:
			c.idle() // nothing buffered: wait
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-c.done:
				return nil, fmt.Errorf("pubsub: fetch: %w", broker.ErrClosed)
			case item, ok = <-c.items:
			}
		}
		if !ok {
			return nil, fmt.Errorf("pubsub: fetch: %w", broker.ErrClosed)
		}
		out = c.appendItem(out, item)
	}
	for len(out) < max {
		select {
		case item, ok := <-c.items:
			if !ok {
				return out, nil
			}
			out = c.appendItem(out, item)
		default:
			return out, nil
		}
	}
	return out, nil
}

// appendItem appends the delivery item holds, if it is a decodable message.
func (c *Consumer) appendItem(out []*broker.Delivery, item any) []*broker.Delivery {
	switch it := item.(type) {
	case *redis.Message:
		d := &broker.Delivery{}
		if _, err := codec.Decode([]byte(it.Payload), &d.Message); err != nil {
			n := c.malformed.Add(1)
			c.log.Warn("pubsub: dropping undecodable message", "channel", it.Channel, "bytes", len(it.Payload), "error", err, "malformed_total", n)
			return out
		}
		d.Queue = c.queue
		return append(out, d)
	case *redis.Subscription:
		// go-redis resubscribes after a reconnect; whatever was published
		// in between is gone, which is what at-most-once means.
		if it.Kind == "subscribe" || it.Kind == "ssubscribe" {
			c.log.Warn("pubsub: resubscribed after a reconnect; messages published meanwhile were lost", "channel", it.Channel)
		}
	}
	return out
}

// Malformed returns how many received messages could not be decoded and
// were dropped.
func (c *Consumer) Malformed() uint64 { return c.malformed.Load() }

// Ack does nothing: a received message is already gone from Redis.
func (c *Consumer) Ack(context.Context, ...*broker.Delivery) error { return nil }

// Release does nothing: there is no queue to hand a message back to, so a
// released message is lost (at-most-once).
func (c *Consumer) Release(context.Context, ...*broker.Delivery) error { return nil }

// Retry returns broker.ErrUnsupported: nothing keeps a message to redeliver.
func (c *Consumer) Retry(context.Context, *broker.Delivery, time.Time) error {
	return fmt.Errorf("pubsub: retry: %w", broker.ErrUnsupported)
}

// Postpone returns broker.ErrUnsupported: nothing keeps a message to
// redeliver.
func (c *Consumer) Postpone(context.Context, *broker.Delivery, time.Time) error {
	return fmt.Errorf("pubsub: postpone: %w", broker.ErrUnsupported)
}

// Discard returns broker.ErrUnsupported: there is no discard queue.
func (c *Consumer) Discard(context.Context, *broker.Delivery, string) error {
	return fmt.Errorf("pubsub: discard: %w", broker.ErrUnsupported)
}

// Extend returns broker.ErrUnsupported: there are no leases.
func (c *Consumer) Extend(context.Context, time.Duration, ...*broker.Delivery) error {
	return fmt.Errorf("pubsub: extend: %w", broker.ErrUnsupported)
}

// Close unsubscribes and closes the subscription's connection; buffered
// messages are dropped. Fetch then returns broker.ErrClosed, and so does a
// second Close.
func (c *Consumer) Close(ctx context.Context) error {
	err := fmt.Errorf("pubsub: close: %w", broker.ErrClosed)
	c.closeOnce.Do(func() {
		close(c.done)
		var uerr error
		if c.sharded {
			uerr = c.ps.SUnsubscribe(ctx, c.channel)
		} else {
			uerr = c.ps.Unsubscribe(ctx, c.channel)
		}
		if uerr != nil {
			// Closing the connection below ends the subscription anyway.
			c.log.Debug("pubsub: unsubscribe", "error", uerr)
		}
		err = nil
		if cerr := c.ps.Close(); cerr != nil {
			err = fmt.Errorf("pubsub: close: %w", cerr)
		}
	})
	return err
}
