// Package list is Conveyor's at-least-once, FIFO broker on Redis lists:
// seed 001's LPUSH / RPOPLPUSH queue with a watcher, done with leases,
// fencing tokens and atomic recovery.
//
// Each queue q has five keys (all <prefix>:{q}:..., one cluster slot):
//
//	ready         LIST  stored messages; Enqueue LPUSHes, Fetch RPOPs (FIFO)
//	inflight      HASH  id -> stored message, deliveries incremented at fetch
//	lease         ZSET  id, score = lease deadline (unix ms)
//	delayed       ZSET  stored message, score = run-at (unix ms)
//	dead          LIST  discard records, newest first, capped (dead_dropped counts the trimmed)
//
// Every state change is one Lua script (lua/*.lua). Fetch leases a batch
// in one call and, in the same call, promotes due delayed messages and hands
// expired leases back to the front of the ready list. The delivery count
// stored in the message is the fencing token: Ack, Retry, Release, Discard
// and Extend compare it with the delivery's Token in the same script, so a
// consumer whose lease was reclaimed gets broker.ErrLeaseLost and changes
// nothing. An idle Fetch blocks in Redis (BLMOVE of the ready list onto
// itself, which moves nothing) instead of polling.
//
//	d, err := list.New(rdb, &list.Config{Prefix: "app"})
//	if err != nil {
//		return err
//	}
//	if err := d.Check(ctx); err != nil { // Redis 7+, warns on an eviction policy
//		return err
//	}
//	err = d.Enqueue(ctx, []*broker.Message{{ID: "42", Kind: "email", Queue: "mail", Payload: body}})
//	c, _ := d.Open(ctx, "mail", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
//	ds, err := c.Fetch(ctx, 50) // blocks until something is ready
//	// ... run them, then settle all in one script call:
//	err = c.Ack(ctx, ds...)
package list
