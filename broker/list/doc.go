// Package list is Conveyor's at-least-once, FIFO broker on Redis lists: an
// LPUSH / pop queue whose in-flight jobs are leased, fenced by a token and
// recovered atomically when a worker dies.
//
// Each queue q has five keys and two counters (all <prefix>:{q}:..., one
// cluster slot):
//
//	ready         LIST    stored messages; Enqueue LPUSHes, Fetch RPOPs (FIFO)
//	lease         ZSET    stored message in flight, score = lease deadline
//	                      (unix ms)
//	delayed       ZSET    timer ID (the message ID), score = due time (unix ms)
//	timers        HASH    timer ID -> stored message (internal/timers)
//	dead          LIST    discard records, newest first, capped by count
//	                      and age (the Driver's broker.Discards methods)
//	dead_dropped  STRING  count of discard records the count cap trimmed
//	dead_expired  STRING  count of discard records the age limit trimmed
//
// Every state change is one Lua script (lua/*.lua). Fetch leases a batch
// in one call and, in the same call, hands expired leases back to the front
// of the ready list. A message with a RunAt ahead, or retried to a later
// time, is a timer: a delay.Promoter moves it to the back of the ready list
// when due (the Driver's broker.Timers methods; docs/delay.md). MaxLen
// counts ready, delayed and lease together.
//
// An expired lease counts a recovery on its message, not an attempt: the
// worker crashed or stalled, the handler did not fail. A message that keeps
// taking its worker down is poison: the reclaim that would give it
// Config.MaxRecoveries recoveries (3 by default) moves it to the discard
// list instead, with reason "conveyor: poison: lease expired <n> times",
// in the same script, so it is never delivered again.
//
// A stored value the driver cannot decode (written by hand or by another
// program) is not poison and does not wait for a lease to run out: the
// fetch that pops it moves it to the discard list, as it was stored, with
// the decode error as the reason ("conveyor: malformed stored message:
// ..."), and logs it at Error. fetch.lua does so itself for a value whose
// header it cannot read; the Go side for one whose header fetch.lua reads
// but Go refuses (a counter of 11 digits, an ID length past the end, a body
// that does not decode).
//
// The lease ZSET is the in-flight structure; there is no other. Its member
// is the whole stored message, and that string is the Delivery's Receipt;
// its Token is the delivery count in the message's header. A waiting
// message carries the count its next delivery will have (1 when enqueued),
// and every way back to the queue (reclaim, retry, release) increments it,
// so fetch leases each message exactly as it pops it, without rewriting it
// (a rewrite there cost 13% of the Redis instructions per job). Ack,
// Retry, Release, Discard and Extend name the member, so fencing is exact:
// a message that was reclaimed and fetched again is a different member (a
// higher count), and a consumer still holding the old delivery finds
// nothing, gets broker.ErrLeaseLost and changes nothing.
//
// The members are longer than Redis's zset-max-listpack-value (64 bytes)
// for all but tiny messages, so the ZSET is a skiplist with a hash table:
// adding and finding a lease cost O(log n) and O(1), not a scan. An
// in-flight entry without a lease cannot exist: the lease ZSET is the
// in-flight structure, so asynq #1144 (a job stuck in flight after its lease
// was lost) cannot happen.
//
// One corner follows from this: two copies of one message with the same
// bytes and the same delivery count (a producer enqueued the same ID and
// content twice, EnqueuedAt included) are one lease member. Fetch leases
// them once when they come in one batch; fetched in two batches they share
// the member, so the first to settle wins and the other gets
// broker.ErrLeaseLost. Either way the job ran at least once, which is all
// at-least-once promises for a duplicate.
//
// An idle Fetch blocks in Redis (BLMOVE of the ready list onto itself,
// which moves nothing) instead of polling.
//
//	d, err := list.New(rdb, &list.Config{Prefix: "app"})
//	if err != nil {
//		return err
//	}
//	if err := d.Check(ctx); err != nil { // Redis 7+, the ACL; warns on an eviction policy
//		return err
//	}
//	err = d.Enqueue(ctx, []*broker.Message{{ID: "42", Kind: "email", Queue: "mail", Payload: body}})
//	c, _ := d.Open(ctx, "mail", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
//	ds, err := c.Fetch(ctx, 50) // blocks until something is ready
//	// ... run them, then settle all in one script call:
//	err = c.Ack(ctx, ds...)
package list
