package broker

import (
	"context"
	"time"
)

// Discards is the discard queue (dead letters) of a driver whose
// Capabilities has Discard; such a driver implements it. Each queue keeps the
// messages it discarded as records, newest first: the message as it was
// (its Retries and Recoveries say how it got there), the reason (the last
// error, or why the driver gave up on it) and when.
//
// Retention is by count and by age, and what it drops is counted
// (DiscardStats): the oldest records go first, when a queue holds more than
// its cap or when they are older than its maximum age. Every call that adds
// records enforces both, and the reading calls enforce the age limit before
// they read, so no call returns a record past it.
//
// Redrive and PurgeDiscarded work through the records oldest first, a
// bounded page per script call, and act only on records discarded before
// the call began: a message re-driven and discarded again during the call
// is not re-driven twice by it.
type Discards interface {
	// ListDiscarded returns up to limit records of queue (at most 1,000 per
	// call) from position offset on, newest first, and how many records the
	// queue holds.
	ListDiscarded(ctx context.Context, queue string, offset, limit int) ([]*Discarded, int64, error)
	// GetDiscarded returns the newest record of the message id in queue, nil
	// when there is none.
	GetDiscarded(ctx context.Context, queue, id string) (*Discarded, error)
	// Redrive moves the records of queue that f selects, oldest first, up
	// to max of them (0: all), back to the queue's ready structure as
	// messages to run again at once, and reports how many it moved. A
	// re-driven message starts afresh: its Retries and Recoveries are 0; its
	// ID, kind, payload, headers, options and EnqueuedAt are kept. A record
	// whose stored message has no readable header stays where it is
	// (PurgeDiscarded removes it). Redrive does not check a queue's maximum
	// length or unique keys: it hands back what was already accepted once.
	Redrive(ctx context.Context, queue string, f DiscardFilter, max int) (int, error)
	// PurgeDiscarded deletes the records of queue that f selects, oldest
	// first, up to max of them (0: all), and reports how many it deleted.
	// Purged records are not counted as dropped.
	PurgeDiscarded(ctx context.Context, queue string, f DiscardFilter, max int) (int, error)
	// DiscardStats returns the figures of queue's discard queue.
	DiscardStats(ctx context.Context, queue string) (DiscardStats, error)
}

// Discarded is one record of a discard queue.
type Discarded struct {
	// Message is the message as it was when discarded (Queue set): Attempt()
	// is the attempt that ran last, Recoveries counts its crash recoveries.
	Message
	// Reason says why: the handler's last error, or the driver's reason
	// (PoisonReason for a message that took its workers down, or an
	// undecodable message).
	Reason string
	// DiscardedAt is when the message was discarded, by the server's clock
	// (to the millisecond).
	DiscardedAt time.Time
	// Raw holds the stored message when it cannot be decoded (Message then
	// holds what could be read of it, the ID at least when its header is
	// intact), or the whole record when even that is unreadable; nil
	// otherwise.
	Raw []byte
}

// DiscardFilter selects discard records. Its zero value selects every
// record; each field set narrows the selection.
type DiscardFilter struct {
	// ID selects the records of the message with this ID (a message
	// discarded, re-driven and discarded again has several).
	ID string
	// Kind selects the records of messages of this kind.
	Kind string
}

// DiscardStats are the figures of one queue's discard queue.
type DiscardStats struct {
	// Count is how many records the queue holds.
	Count int64
	// Oldest is when the oldest record was discarded; zero when there is
	// none.
	Oldest time.Time
	// DroppedByCount counts the records retention dropped because the queue
	// held more than MaxCount.
	DroppedByCount int64
	// DroppedByAge counts the records retention dropped because they were
	// older than MaxAge.
	DroppedByAge int64
	// MaxCount is the cap on records in force.
	MaxCount int
	// MaxAge is the age limit in force; negative when records are kept
	// whatever their age.
	MaxAge time.Duration
}

// Default discard retention of the Redis drivers (their Config.DiscardMax and
// Config.DiscardMaxAge).
const (
	DefaultDiscardMax    = 10000
	DefaultDiscardMaxAge = 7 * 24 * time.Hour
)
