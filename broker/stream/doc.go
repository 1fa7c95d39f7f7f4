// Package stream is the Redis Streams driver of Conveyor: at-least-once
// delivery through a consumer group, with delays, retries, lease extension
// and a discard list. It implements broker.Driver and broker.Consumer.
//
//	d, err := stream.New(rdb, nil) // rdb: a go-redis UniversalClient
//	if err != nil { ... }
//	if err := d.Check(ctx); err != nil { ... } // Redis 7.0+, the ACL, noeviction
//	err = d.Enqueue(ctx, []*broker.Message{{ID: "order:42", Kind: "email", Queue: "mail", Payload: body}})
//	c, err := d.Open(ctx, "mail", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
//	ds, err := c.Fetch(ctx, 50) // blocks until at least one delivery
//	err = c.Ack(ctx, ds...)
//
// # Keys
//
// Per queue q (prefix p, see Config):
//
//	p:{q}:stream   STREAM; each entry has one field "m", the encoded message
//	               (internal/codec). Consumer group Config.Group, created with
//	               the stream (XGROUP CREATE ... 0 MKSTREAM) in the same script
//	               as the first XADD, so the group sees every entry.
//	p:{q}:delayed  ZSET of timer IDs (message IDs) scored by due time (unix
//	               ms), and p:{q}:timers, a HASH of their encoded messages:
//	               timers, which a delay.Promoter appends to the stream when
//	               due (the Driver's broker.Timers methods; docs/delay.md).
//	p:{q}:dead     LIST of discard records (Consumer.Discard, undecodable
//	               entries, poison messages), newest first, capped at
//	               Config.DiscardMax records and Config.DiscardMaxAge (the
//	               Driver's broker.Discards methods list, re-drive and purge
//	               them).
//	p:{q}:dead_dropped  STRING: how many records the count cap trimmed.
//	p:{q}:dead_expired  STRING: how many records the age limit trimmed.
//	p:{q}:canceled ZSET of the entry IDs of in-flight deliveries whose job
//	               was cancelled (Driver.CancelJob), scored by when (unix
//	               ms), kept a day at most; their job IDs are published on
//	               the channel p:{q}:cancels (Driver.WatchCancels).
//	p:{q}:done     HASH job ID -> record of a finished job, and
//	               p:{q}:done_at, a ZSET of those job IDs scored by when the
//	               record expires (unix ms), and p:{q}:done_counts, a HASH of
//	               what retention removed (expired, dropped): written only by
//	               an Ack or Discard of a delivery whose Finish is set, in the
//	               settling script (the Driver's broker.Records methods read
//	               them); capped at Config.RecordMax records, and the three
//	               keys expire with their latest record.
//	p:{q}:group_jobs, p:{q}:groups, p:{q}:group_wait, p:{q}:group_msgs
//	               the FIFO groups of the queue's messages with a
//	               Message.Group (internal/groups): which jobs are admitted
//	               (appended to the stream, in flight or waiting as a retry)
//	               and which wait in their group's line, outside the stream,
//	               until a job of the group ends (ack, discard, poison,
//	               cancel, purge); present only while the queue has grouped
//	               jobs.
//	p:{q}:limits, p:{q}:limit_state, p:{q}:limit_of, p:{q}:limit_wait,
//	p:{q}:limit_msgs, p:{q}:limit_jobs
//	               the queue's concurrency limits (internal/limits; the
//	               Driver's broker.Limiter methods): each limit, its slots
//	               held, which delivery holds which slots (by entry ID), and
//	               the jobs waiting in each limit's line for a slot, outside
//	               the stream; present only while the queue has a limit, a
//	               slot held or a job waiting.
//
// # Leases and fencing
//
// A fetched entry sits in the group's pending list (PEL) under this
// consumer's name; the lease is its idle time. Entries idle longer than the
// visibility timeout are taken over by the next Fetch of any consumer
// (XAUTOCLAIM), which also bumps their delivery count. A delivery's receipt is
// its entry ID and its token "<entry ID>/<delivery count>": every settle and
// extension checks, in its script, that the entry is pending, owned by this
// consumer, with that count. XACK alone would let a consumer whose lease
// expired acknowledge an entry another consumer is running. Crash recoveries
// (delivery count - 1) are reported in Message.Recoveries and carried into the
// message when it is retried or released, since a new entry starts from 0.
//
// Extend resets the idle time so that the entry expires ttl from now, but no
// further than one visibility timeout away: takers measure idleness against
// their own visibility timeout, so consumers of one queue should share it.
//
// # Poison messages
//
// A message whose lease keeps running out most likely takes its worker down
// (a crash, an OOM kill, a hang). Its lease expiries are its recoveries: the
// ones carried in the stored message plus this entry's delivery count - 1.
// When the XAUTOCLAIM that takes an entry over would give the message
// Config.MaxRecoveries recoveries (default 3), fetch.lua moves it to the
// discard list in the same script instead of delivering it, with reason
// "conveyor: poison: lease expired <n> times" and its recoveries set to n.
// The driver logs the entry and message IDs at Warn and counts them in
// Stats().Poisoned. Recoveries are not attempts: handler failures (retries)
// are counted apart, in Message.Retries.
//
// # Cancelling a job
//
// Driver.CancelJob cancels a job by ID in whatever state it is: a delayed
// job's timer is removed, a ready entry is deleted, and an in-flight
// delivery is marked by its entry ID. Its holder hears of it from
// WatchCancels, and from every Extend of the delivery, which reports
// broker.ErrJobCanceled and still extends the lease; it ends the job with
// Ack. A takeover of a marked delivery's expired lease (its holder died)
// deletes the entry instead of delivering it. A retried or released job is
// a new entry, so a mark never reaches a later job under the same ID. The
// marks cost a fetch nothing and a takeover or an Extend one EXISTS while
// none is marked.
//
// # Deletion, never trimming
//
// Acked, retried and discarded entries are XDELed in the settling script,
// cancelled ones by CancelJob (ready) or by the takeover that finds them
// marked (in flight, their holder dead). The driver never trims (no XTRIM,
// no MAXLEN), so an entry is never removed while it is pending. A drained
// stream stays, with its group (an empty stream is a few hundred bytes):
// idle consumers block on it in XREADGROUP, and Redis hands each new entry
// to one of them, where deleting it would wake them all. Entries deleted by
// hand while pending are dropped from the PEL by XAUTOCLAIM: the driver
// logs their IDs at Warn and counts them in Stats().DeletedWhilePending, as
// their messages are lost.
//
// # Concurrency limits
//
// Driver.SetLimit caps how many jobs of a queue, or of one kind in it, run
// at once across the fleet. A delivery takes its slots when it is read,
// before Fetch hands it out, and holds them under its entry ID; a takeover
// keeps the entry ID, so a delivery taken over keeps its slots (none is
// taken twice). An entry read over a limit is XACKed and XDELed and its job
// waits in the limit's line, with no attempt counted. Every way a delivery
// ends gives its slots back and appends the next waiting jobs to the
// stream: Ack, Discard, Retry, Postpone, Release (the entry is gone, the
// message stored again takes slots anew), a hand-back, and a takeover that
// discards the entry as poison, removes it as cancelled or finds it
// deleted. An entry whose lease expired keeps its slots: the consumer that
// takes it over (after its own visibility timeout) runs it with them.
// CancelJob removes a job waiting in a line.
//
// A queue without limits pays little: a plain read sends an EXISTS of the
// limits key in its own round trip; settling sends one EXISTS per script
// call; a blocking read that returns entries is followed by one more
// script call (admit.lua), which reads the limits and returns at once.
//
// # Blocking
//
// An empty Fetch blocks in XREADGROUP ... BLOCK (outside Lua, where blocking
// is not allowed) for at most Config.PollInterval; a promoter's XADD of a due
// timer wakes it at once. A missing stream is awaited with XREAD BLOCK. Each blocking
// read holds one connection of the client's pool.
//
// A consumer opened with broker.ConsumerOptions.Kept (a worker pool's, when
// the pools of a queue elect a keeper: Driver.Campaign) sleeps instead on
// the queue's wake signals (internal/wake: BZPOPMIN, up to a minute, one
// command a minute when idle): {q}:wake, set with every entry added, hands
// each new job to one sleeping consumer; {q}:reclaim, set by the keeper
// (Driver.Upkeep, one XPENDING a second) when a lease expired, wakes one to
// run a takeover pass at once; that pass takes a quarter of what its Fetch
// asked for and, when it got that many, wakes the next sleeping consumer
// for more, so a crash's jobs go back to several workers. A kept consumer
// under load (woken after less than PollInterval asleep) also runs its own
// pass once per PollInterval, as a consumer that is not kept does, so the
// expired leases of a crash under load are taken over by every busy
// consumer rather than all by the ones the signal wakes (which would put
// them in few workers' hands, and one more crash would count a recovery
// against each). A consumer woken after PollInterval or more asleep puts
// its own pass off for PollInterval: an idle fleet sends no command per
// consumer, and a job handed to an idle consumer costs one read, whatever
// the number of consumers. A read or pass that filled its batch wakes the
// next consumer. A stopping consumer ends its own wait at once.
package stream
