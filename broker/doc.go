// Package broker is the seam between Conveyor and a message store.
//
// A Driver moves Messages through a queue; a Consumer fetches Deliveries
// (a Message plus its lease) and settles them. Three drivers ship with
// Conveyor: broker/list and broker/stream (at-least-once, leased) and
// broker/pubsub (at-most-once fan-out). broker/brokertest holds the
// conformance suite every driver runs; a third-party driver is correct when it
// passes it. One promise there matters beyond a single queue: Fetch calls
// ConsumerOptions.Idle each time it is about to wait with nothing to return
// (the queue is empty or paused), and not when it has messages (brokertest's
// FetchIdle). A worker pool that serves several queues learns from it that a
// queue is empty: with a driver that never calls it, such a pool can stop
// starting jobs while one of its queues is empty.
//
// This package imports nothing else from Conveyor and no Redis client, so a
// driver's contract can be read on one page:
//
//	d, _ := list.New(rdb, nil)
//	_ = d.Enqueue(ctx, []*broker.Message{{ID: id, Kind: "email", Queue: "mail", Payload: body}})
//	c, _ := d.Open(ctx, "mail", nil)
//	ds, _ := c.Fetch(ctx, 10) // blocks until at least one delivery or ctx is done
//	_ = c.Ack(ctx, ds...)
package broker
