// Package list is Conveyor's at-least-once, FIFO broker on Redis lists: an
// LPUSH / pop queue whose in-flight jobs are leased, fenced by a token and
// recovered atomically when a worker dies.
//
// Each queue q has six keys and two counters (all <prefix>:{q}:..., one
// cluster slot):
//
//	ready         LIST    stored messages; Enqueue LPUSHes, Fetch RPOPs (FIFO)
//	lease         ZSET    receipt of a delivery in flight, score = lease
//	                      deadline (unix ms)
//	inflight      HASH    receipt -> stored message in flight
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
// A delivery's Receipt is short, whatever the payload:
// "<token>,<len(id)>:<id>", where the Token is "<consumer>.<fetch>", a
// random name of the consumer (60 hex digits: see lib.lua) and its count of
// fetches ("<consumer>.<fetch>.<k>", k the place in the batch, when two
// messages of one fetch share an ID). The receipt is the delivery's member of the lease ZSET
// and its field in the inflight HASH, which holds the message while it is in
// flight; every script changes both together, so no message is in flight
// without a lease. Ack, Retry, Release, Discard and Extend send receipts
// only (an Extend of a 512 KiB job sends a few hundred bytes, not the job),
// at most 512 per script call, and fencing is exact: a message that was
// reclaimed and fetched again has another receipt, and a consumer still
// holding the old delivery finds nothing, gets broker.ErrLeaseLost and
// changes nothing. The consumer, not Redis, makes the token, so a failover
// that loses a fetch's writes cannot hand the next fetch the same receipt.
//
// A fetch whose reply is lost (the connection broke after Redis ran it)
// leased a batch nobody holds. The consumer knows the token it sent, finds
// that batch's receipts in the inflight HASH (HSCAN, paid only then) and
// releases them to the front of ready, with no recovery counted:
// at once, or before its next fetch (or at Close) while Redis cannot be
// reached. Only a batch it could not hand back waits for its leases to run
// out, as after a crash.
//
// An idle Fetch sleeps in Redis on the queue's wake signal (BZPOPMIN on
// {q}:wake, see internal/wake) instead of polling: whatever pushes to ready
// sets the signal (a plain enqueue only when it finds ready empty: jobs
// already waiting were signalled by whoever pushed the first of them),
// which wakes one idle consumer, not all; a fetch that leaves messages
// behind sets it again for the next, and a consumer woken but closed or
// cancelled before it fetched gives the wake-up back. A consumer opened with
// broker.ConsumerOptions.Kept sleeps up to a minute, as the queue's elected
// keeper (Driver.Campaign, Driver.Upkeep; a worker pool runs them) hands
// back expired leases and sets the signal when ready holds messages; one
// without looks again at least every second and at the next lease deadline.
// A consumer that stops ends its own blocking command at once.
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
