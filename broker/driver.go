package broker

import (
	"context"
	"time"
)

// Capabilities states what a driver promises. The conformance suite in
// broker/brokertest runs only the tests a driver's capabilities call for.
type Capabilities struct {
	// AtLeastOnce: a message stays in Redis until it is settled; a lease
	// that expires hands it back to the queue (redelivery). Without it the
	// driver is at-most-once: a message is lost if no consumer is there to
	// take it or the consumer dies while holding it.
	AtLeastOnce bool
	// FanOut: every open consumer of a queue receives every message. Without
	// it each message goes to exactly one consumer at a time.
	FanOut bool
	// FIFO: one consumer fetches messages in the order they were enqueued
	// (redeliveries and retries aside).
	FIFO bool
	// Delay: Message.RunAt and Consumer.Retry / Postpone with a future time
	// are honoured: the message waits as a timer until promoted. A driver
	// with Delay implements Timers.
	Delay bool
	// Extend: Consumer.Extend moves a lease deadline.
	Extend bool
	// Discard: Consumer.Discard keeps the message in a discard queue. A
	// driver with Discard implements Discards.
	Discard bool
	// Pause: a queue can be paused fleet-wide (the driver implements
	// Pauser): while it is, no consumer's Fetch returns its messages, from
	// at most PauseLag after PauseQueue returned.
	Pause bool
	// Keep: the driver elects one keeper per queue (it implements Keeper
	// and Upkeeper): consumers opened with ConsumerOptions.Kept sleep while
	// idle, every message stored wakes one of them, and the keeper's Upkeep
	// brings expired leases back to them.
	Keep bool
	// Cancel: a job can be cancelled by ID while delayed, ready or in
	// flight (the driver implements Canceler).
	Cancel bool
	// Records: an Ack or Discard of a delivery whose Finish is set keeps a
	// record of the finished job, atomically with the settle (the driver
	// implements Records; see FinishRecord).
	Records bool
	// Groups: Message.Group is honoured (FIFO groups with a limit,
	// fleet-wide). A driver without it refuses a message with a Group
	// (ErrUnsupported) rather than run it out of order.
	Groups bool
	// Limits: fleet-wide concurrency limits per queue and per kind are
	// honoured (the driver implements Limiter).
	Limits bool
	// History: each queue's sizes and counters are sampled by its keeper
	// and kept for a bounded time (the driver implements Historian).
	History bool
}

// ConsumerOptions configure one Consumer. The zero value is valid.
type ConsumerOptions struct {
	// VisibilityTimeout is the lease a fetched message gets; when it runs out
	// without an extension or settle, the message is delivered again.
	// Defaults to 30s. Ignored by drivers without leases.
	VisibilityTimeout time.Duration
	// Kept says that a keeper elected for the queue (Keeper and Upkeeper;
	// a worker pool campaigns for it) watches its expired leases: an idle
	// Fetch sleeps on the queue's wake signal, which a new message (or the
	// keeper, for expired leases) sets, for up to a minute, so an idle
	// consumer sends about one command a minute. Ignored by drivers without
	// an Upkeeper.
	Kept bool
	// Idle, when set, is called by Fetch each time it found nothing it
	// could return (the queue has nothing ready for this consumer, or it is
	// paused) and is about to wait, from the goroutine that called Fetch.
	// It tells a caller that serves several queues that this one is empty
	// for now: a worker pool with strict priorities lets lower queues run
	// only while the higher ones wait here. It must return at once.
	Idle func()
}

// VisibilityTimeoutOrDefault returns the lease length these options ask for.
func (o *ConsumerOptions) VisibilityTimeoutOrDefault() time.Duration {
	if o == nil || o.VisibilityTimeout <= 0 {
		return DefaultVisibilityTimeout
	}
	return o.VisibilityTimeout
}

// DefaultVisibilityTimeout is the lease length when none is configured.
const DefaultVisibilityTimeout = 30 * time.Second

// Driver stores and moves messages. Implementations are safe for concurrent
// use.
type Driver interface {
	// Capabilities reports what the driver promises.
	Capabilities() Capabilities
	// Check verifies the server is reachable and recent enough, so that a
	// process fails at start with a clear error rather than on first use.
	Check(ctx context.Context) error
	// Enqueue stores msgs, which may name different queues, in one round
	// trip where the driver can. A nil error means every message is stored.
	// Messages must pass ValidateMessage.
	Enqueue(ctx context.Context, msgs []*Message) error
	// Open starts consuming queue.
	Open(ctx context.Context, queue string, opts *ConsumerOptions) (Consumer, error)
}

// Consumer fetches and settles the messages of one queue. It is safe for
// concurrent use; settle methods may run while Fetch blocks.
//
// Batch methods settle every delivery they can; the error is nil or a
// *multierror.Error of *DeliveryError, one per delivery that failed, so
// errors.Is(err, ErrLeaseLost) works for a batch of one.
type Consumer interface {
	// Fetch returns between 1 and max deliveries. It blocks while the queue
	// is empty, without polling Redis in a loop, and returns ctx.Err()
	// promptly when ctx is done.
	Fetch(ctx context.Context, max int) ([]*Delivery, error)
	// Ack settles deliveries as done and removes them from Redis.
	Ack(ctx context.Context, ds ...*Delivery) error
	// Retry hands d back to be delivered again at at (now or earlier means at
	// once) and counts a failed attempt.
	Retry(ctx context.Context, d *Delivery, at time.Time) error
	// Postpone hands d back to be delivered again at at (now or earlier
	// means at once) without counting a failed attempt: for a job that could
	// not start (a rate limit, a dependency not ready), not one that failed.
	Postpone(ctx context.Context, d *Delivery, at time.Time) error
	// Release hands deliveries back to the ready queue at once
	// without counting an attempt: for a worker that stops before running them.
	Release(ctx context.Context, ds ...*Delivery) error
	// Discard moves d to the queue's discard queue with reason.
	Discard(ctx context.Context, d *Delivery, reason string) error
	// Extend pushes the lease deadline of each delivery to now + ttl and
	// updates their LeaseDeadline.
	Extend(ctx context.Context, ttl time.Duration, ds ...*Delivery) error
	// Close stops the consumer. Deliveries it holds keep their leases.
	Close(ctx context.Context) error
}

// DefaultMaxRecoveries is how many lease expiries a message may have before
// an at-least-once driver treats it as poison (it took down its worker that
// many times) and moves it to the discard queue with a reason that starts
// with PoisonReason, instead of delivering it again.
const DefaultMaxRecoveries = 3

// PoisonReason starts the discard reason of a message discarded as poison.
const PoisonReason = "conveyor: poison"

// Sleeper is implemented by consumers that can wait for work without
// fetching it (the list and stream drivers' consumers do). A caller that
// serves several consumers at once (broker/shard, over a queue's
// partitions) sleeps on the empty ones this way, so that an empty queue
// costs it nothing until work comes, and no job is leased before a Fetch
// asks for it.
type Sleeper interface {
	// Sleep blocks until the queue may have something for the consumer's
	// next Fetch (a job was stored or promoted, a lease ran out, or a
	// bounded wait ended: a consumer that is not kept returns within about
	// a second, as its own Fetch would look again, and one whose queue is
	// paused within PauseLag), or until ctx is done (ctx.Err()) or the
	// consumer is closed (ErrClosed). It reports whether the queue's
	// wake-up ended it (the consumer took it: see Wake), rather than a
	// bounded wait. It leases nothing and calls no ConsumerOptions.Idle.
	// The next Fetch looks at the queue at once.
	Sleep(ctx context.Context) (woken bool, err error)
	// Wake gives back the wake-up that ended a Sleep (woken), to the queue's other
	// sleeping consumers: a caller whose Sleep ended while it was not going
	// to fetch (its workers are all busy) calls it, so that an idle
	// consumer elsewhere takes the work. A wake-up given back with no one
	// asleep costs the next sleeper one look. One given back once the work
	// is gone (taken by another consumer, or the queue deleted) may wake no
	// one: the list and stream drivers set the signal only while the
	// queue's ready list or stream exists, so that it never outlives a
	// deleted queue's keys.
	Wake(ctx context.Context) error
}
