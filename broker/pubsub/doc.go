// Package pubsub is Conveyor's at-most-once fan-out driver on Redis pub/sub:
// every consumer subscribed to a queue receives every message
// published on it while it is subscribed.
//
// Use it for notifications and fan-out (cache invalidation, "order paid"
// events for live dashboards), never for durable jobs. Nothing is stored:
// a message is lost when it is published while nobody subscribes, while a
// subscriber reconnects, when it arrives beyond a slow subscriber's buffer
// (Config.Buffer), or when the process holding it dies. Accordingly the
// driver has no leases, retries, delays or discard queue: Ack and Release do
// nothing, and Retry, Discard, Extend, a future Message.RunAt and a
// Message.Group (nothing could hold a group's line) return
// broker.ErrUnsupported. For jobs use broker/list or broker/stream.
//
// Each queue is one channel, <prefix>:{<queue>}:ch. On a Redis Cluster the
// driver uses sharded pub/sub (SPUBLISH/SSUBSCRIBE), so a channel's traffic
// stays on the shard that owns its slot; Config.Sharded overrides the
// choice. Enqueue of many messages is one pipeline. Open returns once Redis
// has confirmed the subscription, so a message published after Open returns
// reaches the consumer. Messages that do not decode are logged and counted,
// not returned: c.(*pubsub.Consumer).Malformed() reads the count.
//
//	d, err := pubsub.New(rdb, nil)
//	if err != nil {
//		return err
//	}
//	c, err := d.Open(ctx, "prices", nil) // subscribe before publishing
//	if err != nil {
//		return err
//	}
//	defer c.Close(ctx)
//	err = d.Enqueue(ctx, []*broker.Message{{ID: id, Kind: "price.changed", Queue: "prices", Payload: body}})
//	ds, err := c.Fetch(ctx, 100) // every subscriber of "prices" gets it
package pubsub
