package broker

import "time"

// Message is a job or notification as it travels through a queue.
type Message struct {
	// ID is unique among the live messages of a queue and sortable by
	// creation time when Conveyor generates it. A caller-supplied ID is a
	// business key (for example "order:123:timeout").
	ID string
	// Kind routes the message to a handler.
	Kind string
	// Queue names the queue the message lives in.
	Queue string
	// Payload is opaque to the broker.
	Payload []byte
	// Headers carry metadata such as trace context or an idempotency key.
	Headers map[string]string
	// Retries counts the handler runs that ended in a retry: 0 on the first
	// run. Crash recoveries do not count here; see Recoveries. Attempt
	// numbers the run from 1.
	Retries int
	// Recoveries counts the times the message went back to its queue because
	// a lease expired (its worker crashed or stalled), apart from handler
	// failures.
	Recoveries int
	// MaxAttempts caps handler runs; 0 means the consumer's default.
	MaxAttempts int
	// Timeout bounds one handler run; 0 means the consumer's default.
	Timeout time.Duration
	// EnqueuedAt is when the producer enqueued the message.
	EnqueuedAt time.Time
	// RunAt, when after now, delays the message: it becomes ready at RunAt.
	// Only drivers with Capabilities.Delay accept it.
	RunAt time.Time
	// UniqueKey, when set, makes Enqueue refuse the message (a
	// *DuplicateError naming the key) while another message of its queue
	// holds the key: the first message that claimed it holds it for
	// UniqueTTL. Enqueue-side only; it is not stored with the message.
	UniqueKey string
	// UniqueTTL is how long UniqueKey is held; it must be positive when
	// UniqueKey is set.
	UniqueTTL time.Duration
	// Group, when set, puts the message in a FIFO group of its queue (a
	// business key: an order ID, a tenant): at most GroupLimit messages of
	// one group are admitted at once (ready, in flight or waiting for a
	// retry), fleet-wide, and the others wait in enqueue order. A message
	// is admitted until it is acked or discarded (or cancelled, or
	// discarded as poison): retries and crash recoveries keep its place.
	// Only drivers with Capabilities.Groups accept it. Stored with the
	// message, in the header HeaderGroup.
	Group string
	// GroupLimit is how many messages of Group may be admitted at once;
	// 0 means 1 (one at a time, in order). Enqueue-side only: the group
	// takes the limit of its latest message.
	GroupLimit int
}

// HeaderGroup is the header that stores a message's Group.
const HeaderGroup = "conveyor-group"

// MaxGroupLimit caps Message.GroupLimit.
const MaxGroupLimit = 10000

// Attempt is the number of the handler run the message is on, from 1:
// Retries+1. It is the number logs, spans and discard records call
// "attempt", and a failure of attempt MaxAttempts discards the message. For
// a discarded message it is the attempt that ran last.
func (m Message) Attempt() int { return m.Retries + 1 }

// Delivery is a Message handed to one consumer under a lease.
type Delivery struct {
	Message
	// Receipt identifies this delivery to the driver (an entry ID, a list
	// member); opaque to callers.
	Receipt string
	// Token fences the delivery: every settle and extension is checked
	// against it atomically, so a consumer whose lease expired and whose
	// message was delivered again cannot settle it.
	Token string
	// LeaseDeadline is when the lease runs out unless extended, by this
	// process's clock: drivers take it from the local (monotonic) clock
	// before asking Redis for the lease, so it is never later than the
	// server's deadline, whatever the skew between the machines' wall
	// clocks. Zero for drivers without leases.
	LeaseDeadline time.Time
	// ConsumerGroup names the consumer group that holds the lease, for
	// drivers that have consumer groups (the stream driver); empty
	// otherwise.
	ConsumerGroup string
	// LastChance is set on a delivery whose next lease expiry would make
	// it poison (its Recoveries are one short of the driver's
	// MaxRecoveries, see IsLastChance): the driver leased it alone, and a
	// worker pool fetches nothing more while it runs, so that if it kills
	// its worker again, no other job dies with it. Earlier recoveries run
	// in batches, as any job.
	LastChance bool
	// Finish, set before an Ack or Discard by a caller that wants a record
	// of the finished job, is written by that settle where the driver has
	// Capabilities.Records (see FinishRecord); drivers without it ignore
	// it. Nil writes no record.
	Finish *FinishRecord
}

// IsLastChance reports whether a message with recoveries lease expiries
// behind it is on its last chance under the poison cap maxRecoveries: one
// more expiry makes it poison. Never under a cap below 2 (a cap of 1 makes
// every first expiry fatal; none turns poison off).
func IsLastChance(recoveries, maxRecoveries int) bool {
	return maxRecoveries >= 2 && recoveries >= 1 && recoveries >= maxRecoveries-1
}
