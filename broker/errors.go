package broker

import (
	"errors"
	"fmt"
)

var (
	// ErrLeaseLost means the delivery's lease expired and the message was
	// handed back or to another consumer; the settle or extension did nothing.
	ErrLeaseLost = errors.New("conveyor: lease lost")
	// ErrUnsupported means the driver cannot do what was asked (see
	// Capabilities).
	ErrUnsupported = errors.New("conveyor: not supported by this driver")
	// ErrInvalidQueue is wrapped by every *QueueNameError.
	ErrInvalidQueue = errors.New("conveyor: invalid queue name")
	// ErrInvalidMessage is wrapped by every *MessageError.
	ErrInvalidMessage = errors.New("conveyor: invalid message")
	// ErrQueueFull means the queue is at its configured maximum length.
	ErrQueueFull = errors.New("conveyor: queue full")
	// ErrClosed means the driver or consumer was closed.
	ErrClosed = errors.New("conveyor: closed")
	// ErrRedisTooOld means the server is older than the minimum Conveyor needs.
	ErrRedisTooOld = errors.New("conveyor: redis server too old")
)

// QueueNameError reports a queue name that cannot be used as part of a key.
type QueueNameError struct {
	Name   string
	Reason string
}

func (e *QueueNameError) Error() string {
	return fmt.Sprintf("conveyor: invalid queue name %q: %s", e.Name, e.Reason)
}

func (e *QueueNameError) Unwrap() error { return ErrInvalidQueue }

// MessageError reports a message that cannot be enqueued as it is. ID is
// empty when the message has none the caller knows (the client generates
// IDs, and names a request of a batch by its index instead).
type MessageError struct {
	ID     string
	Field  string
	Reason string
}

func (e *MessageError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("conveyor: invalid message: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("conveyor: invalid message %q: %s: %s", e.ID, e.Field, e.Reason)
}

func (e *MessageError) Unwrap() error { return ErrInvalidMessage }

// DeliveryError ties the error of one settle or extension in a batch to its
// delivery. Batch methods return a *multierror.Error of these.
type DeliveryError struct {
	Delivery *Delivery
	Err      error
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("message %s: %v", e.Delivery.ID, e.Err)
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// QueueError ties an Enqueue error to the queue whose messages it concerns.
// A driver's Enqueue of several queues stores each queue's messages
// independently and reports each refusal as a *QueueError (in a
// *multierror.Error), so a caller can tell which messages were stored.
type QueueError struct {
	Queue string
	Err   error
	// Messages, when set, are the messages of Queue the error concerns
	// (the very pointers given to Enqueue); the call's other messages of
	// Queue were stored. A queue split into partitions (broker/shard)
	// stores each partition's messages on their own and names them so.
	// Nil: every message of Queue in the call.
	Messages []*Message
}

func (e *QueueError) Error() string { return fmt.Sprintf("queue %q: %v", e.Queue, e.Err) }

func (e *QueueError) Unwrap() error { return e.Err }

// ErrDuplicate is wrapped by every *DuplicateError.
var ErrDuplicate = errors.New("conveyor: duplicate")

// DuplicateError reports a message refused because a pending timer of its
// queue already has its ID, or (Key set) because another message of its
// queue holds its unique key. The other messages of the same Enqueue call
// are stored; a driver's Enqueue returns one *DuplicateError per refused
// message (in a *multierror.Error when there are several errors).
type DuplicateError struct {
	Queue string
	// ID is the refused message's ID; empty when a conveyor.Client
	// generated it (the caller never saw it; Message holds it).
	ID  string
	Key string // the unique key it asked for; empty for a duplicate timer or grouped job ID
	// Message is the refused message, the very pointer given to Enqueue,
	// so that a caller who sent several messages with one ID can tell which
	// was refused.
	Message *Message
}

func (e *DuplicateError) Error() string {
	switch {
	case e.Key != "" && e.ID == "":
		return fmt.Sprintf("conveyor: message refused: queue %q has a message holding unique key %q", e.Queue, e.Key)
	case e.Key != "":
		return fmt.Sprintf("conveyor: message %q refused: queue %q has a message holding unique key %q", e.ID, e.Queue, e.Key)
	case e.Message != nil && e.Message.Group != "" && e.ID == "":
		return fmt.Sprintf("conveyor: message refused: queue %q already has a grouped job with its ID", e.Queue)
	case e.Message != nil && e.Message.Group != "":
		return fmt.Sprintf("conveyor: queue %q already has a grouped job %q", e.Queue, e.ID)
	case e.ID == "":
		return fmt.Sprintf("conveyor: message refused: queue %q already has a pending timer with its ID", e.Queue)
	}
	return fmt.Sprintf("conveyor: queue %q already has a pending timer %q", e.Queue, e.ID)
}

func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// ErrNotReplicated is wrapped by every *ReplicationError.
var ErrNotReplicated = errors.New("conveyor: not acknowledged by enough replicas")

// ReplicationError reports a write that Redis stored on its master but
// that fewer replicas than asked for acknowledged within the wait's timeout
// (a driver configured to wait for replicas returns it). The write is not
// undone: the jobs are queued and will run unless the master fails before
// they reach a replica. Enqueueing them again would store them twice.
type ReplicationError struct {
	Acked  int   // replicas that acknowledged the write in time
	Wanted int   // replicas the driver waits for
	Err    error // the WAIT's own error, when it failed (Acked is then 0)
}

func (e *ReplicationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("conveyor: stored, but the wait for %d replicas failed (%v): a failover now could lose it", e.Wanted, e.Err)
	}
	return fmt.Sprintf("conveyor: stored, but acknowledged by %d of %d replicas in time: a failover now could lose it", e.Acked, e.Wanted)
}

func (e *ReplicationError) Unwrap() error { return ErrNotReplicated }
