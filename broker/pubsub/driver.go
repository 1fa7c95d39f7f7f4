package pubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/workers"
)

// Driver publishes messages on Redis pub/sub channels, one per queue, and
// fans each one out to every consumer subscribed at that moment. It is safe
// for concurrent use.
type Driver struct {
	rdb     redis.UniversalClient
	prefix  string
	buffer  int
	sharded bool
	log     *slog.Logger

	*workers.Registry // broker.WorkerRegistry
}

var _ broker.Driver = (*Driver)(nil)

// New returns a driver on client; cfg may be nil for the defaults.
func New(client redis.UniversalClient, cfg *Config) (*Driver, error) {
	if client == nil {
		return nil, errors.New("pubsub: new: nil redis client")
	}
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	_, cluster := client.(*redis.ClusterClient)
	sharded := cluster
	if r.sharded != nil {
		sharded = *r.sharded
	}
	return &Driver{rdb: client, prefix: r.prefix, buffer: r.buffer, sharded: sharded, log: r.logger,
		Registry: workers.New(client, r.prefix)}, nil
}

// Capabilities reports at-most-once fan-out: no leases, no redelivery, no
// delay, no discard queue, and no ordering promise across reconnects.
func (d *Driver) Capabilities() broker.Capabilities {
	return broker.Capabilities{FanOut: true}
}

// Sharded reports whether the driver uses sharded pub/sub.
func (d *Driver) Sharded() bool { return d.sharded }

// Enqueue publishes msgs, in one pipeline when there are several. Every
// message is validated first, so a batch with one bad message publishes none.
// A nil error means Redis accepted every publish, not that anyone received
// it: a message published while no consumer is subscribed is gone.
func (d *Driver) Enqueue(ctx context.Context, msgs []*broker.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	now := time.Now()
	if _, err := broker.ValidateBatch(msgs); err != nil {
		return fmt.Errorf("pubsub: enqueue: %w", err)
	}
	for _, m := range msgs {
		if m.RunAt.After(now) {
			return fmt.Errorf("pubsub: enqueue %s: RunAt: %w", m.ID, broker.ErrUnsupported)
		}
		if m.UniqueKey != "" {
			return fmt.Errorf("pubsub: enqueue %s: UniqueKey: %w", m.ID, broker.ErrUnsupported)
		}
		if m.Group != "" {
			return fmt.Errorf("pubsub: enqueue %s: Group: %w", m.ID, broker.ErrUnsupported)
		}
	}
	if len(msgs) == 1 {
		if err := d.publish(ctx, d.rdb, msgs[0], now).Err(); err != nil {
			return fmt.Errorf("pubsub: enqueue: %w", err)
		}
		return nil
	}
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range msgs {
			d.publish(ctx, p, m, now)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pubsub: enqueue %d messages: %w", len(msgs), err)
	}
	return nil
}

// publish queues or sends one PUBLISH (or SPUBLISH) of m's stored encoding.
func (d *Driver) publish(ctx context.Context, c redis.Cmdable, m *broker.Message, now time.Time) *redis.IntCmd {
	if m.EnqueuedAt.IsZero() {
		cp := *m // stamp a copy; the caller's message is not ours to change
		cp.EnqueuedAt = now
		m = &cp
	}
	ch := keys.Channel(d.prefix, m.Queue)
	body := codec.Encode(m, 0)
	if d.sharded {
		return c.SPublish(ctx, ch, body)
	}
	return c.Publish(ctx, ch, body)
}

// Open subscribes to queue's channel and returns once Redis has confirmed
// the subscription: every message published after Open returns reaches the
// consumer (while its connection holds). A refusal (an ACL without the
// channel: NOPERM) is returned as soon as Redis sends it. Of opts only Idle
// applies: there are no leases and no keeper.
func (d *Driver) Open(ctx context.Context, queue string, opts *broker.ConsumerOptions) (broker.Consumer, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return nil, fmt.Errorf("pubsub: open: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pubsub: open %s: %w", queue, err)
	}
	ch := keys.Channel(d.prefix, queue)
	ps, err := d.subscribe(ctx, ch)
	if err != nil {
		return nil, fmt.Errorf("pubsub: open %s: %w", queue, err)
	}
	items := ps.ChannelWithSubscriptions(redis.WithChannelSize(d.buffer))
	var idle func()
	if opts != nil {
		idle = opts.Idle
	}
	return newConsumer(d, queue, ch, ps, items, idle), nil
}

// subscribe subscribes to ch (SSUBSCRIBE when sharded) on a connection of
// its own and returns once Redis has confirmed it; the confirmation
// arrives before any message of the channel, so none published after
// subscribe returns is missed. Redis's reply is read directly rather than
// through go-redis's channel, which drops error replies (an ACL's NOPERM)
// and would leave the wait to ctx. The caller closes the PubSub.
func (d *Driver) subscribe(ctx context.Context, ch string) (*redis.PubSub, error) {
	var (
		ps   *redis.PubSub
		err  error
		kind = "subscribe"
	)
	// An empty PubSub first, then the subscribe call, so that its error
	// (the write of the command) is not lost as it is in
	// client.Subscribe(ctx, ch).
	if d.sharded {
		kind = "ssubscribe"
		ps = d.rdb.SSubscribe(ctx)
		err = ps.SSubscribe(ctx, ch)
	} else {
		ps = d.rdb.Subscribe(ctx)
		err = ps.Subscribe(ctx, ch)
	}
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	// go-redis reads under ctx's deadline but not its cancellation: the read
	// runs apart, and closing the PubSub ends it.
	confirmed := make(chan error, 1)
	go func() {
		for {
			msg, err := ps.Receive(ctx)
			if err != nil {
				confirmed <- err
				return
			}
			if s, ok := msg.(*redis.Subscription); ok && s.Kind == kind && s.Channel == ch {
				confirmed <- nil
				return
			}
		}
	}()
	select {
	case err = <-confirmed:
	case <-ctx.Done():
		_ = ps.Close()
		<-confirmed
		return nil, ctx.Err()
	}
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	return ps, nil
}
