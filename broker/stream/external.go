package stream

import (
	"fmt"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
)

// This file is the contract for an application's own Lua script that adds a
// job to a queue atomically with its own writes: a flash sale's script that
// decrements stock, records the buyer and enqueues the order in one step
// (examples/seckill). Enqueue cannot take part in another script; PrepareAdd
// gives the script what Enqueue itself would write.
//
// The script must, with every key in KEYS:
//
//	if redis.call('EXISTS', stream) == 0 then
//	  redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
//	end
//	redis.call('XADD', stream, '*', 'm', stored)
//	redis.call('ZADD', signal, 0, 'w')
//
// where stream, group, stored and signal are the fields of PrepareAdd(m):
// the ZADD wakes one sleeping worker pool (internal/wake); without it the
// job waits until the queue's keeper notices it, within about a second. The group
// must be created with the stream, from ID 0, in the same script as the
// first XADD: the driver's own enqueue appends with a plain XADD NOMKSTREAM
// while the stream exists, trusting that the group does too (an operator
// may delete a stream, and its group with it). On Redis Cluster every key of
// the script must hash to the queue's slot: give the application's keys the
// queue's hash tag, {<queue>} (the stream's key is <prefix>:{<queue>}:stream).
//
// The stream must be the one of m's own queue. The stored form does not
// name a queue: a job belongs to the stream it is added to, so one added to
// another queue's stream runs on that queue's workers, not on the queue m
// names (and on Cluster, sits in another slot than keys tagged {m.Queue}).
// PrepareAdd derives the stream and the stored form from the same m; the
// finer-grained Stored and StreamKey leave that match to the caller.
//
// What Enqueue does and such a script does not:
//   - MaxLen: the queue's cap is not checked.
//   - Unique keys, delays and groups: PrepareAdd refuses a message with a
//     UniqueKey, a RunAt or a Group, which only Enqueue carries out.
//     Enqueue such jobs apart.
//   - The queue registry (Inspector.Queues): Enqueue adds a queue to it;
//     a consumer's Open does too, so a queue with a worker pool is listed.
//   - ID and EnqueuedAt: the client fills them in; here the caller must.
//     The ID must be unique among the queue's live messages.
//
// Nor does the conveyor.Client's work before the driver, as the script's
// message never passes through a Client:
//   - ClientConfig.Middleware does not run: contrib/otelconveyor starts no
//     PRODUCER span and injects no trace context into the headers (inject
//     it into m.Headers yourself, with the propagator, for the consumer's
//     span to link to the producer), and no other enqueue middleware sees
//     the job.
//   - ClientConfig.MaxPayloadBytes is not checked: PrepareAdd takes a
//     payload of any size.
//   - EnqueueOptions.VisibilityTimeout does not exist here: the Client
//     turns it into the header conveyor.HeaderVisibilityTimeout
//     ("conveyor-visibility-timeout", milliseconds); for a job's own lease,
//     set that header in m.Headers.
//
// A message stored this way is fetched, acked, retried, extended, recovered
// after a crash and discarded like any other (external_test.go checks it).

// ScriptAdd is what an application script needs to add one message to its
// queue (see the contract above), all derived from the message.
type ScriptAdd struct {
	// StreamKey is the stream of the message's queue, for the script's
	// KEYS.
	StreamKey string
	// Group is the consumer group the script creates with a missing stream
	// (Config.Group).
	Group string
	// Stored is the message in the form the driver keeps it, the value of
	// the entry's field "m".
	Stored string
	// SignalKey is the queue's wake signal, for the script's KEYS: a ZSET
	// the script adds the member "w" to, which wakes one sleeping consumer.
	SignalKey string
}

// PrepareAdd returns what an application script needs to add m to its
// queue's stream itself (see the contract above): the stream of m.Queue,
// the group and m's stored form. m must be complete and valid as for
// Enqueue (queue, ID and kind set; broker.ValidateMessage); a message with a
// UniqueKey, a RunAt or a Group is refused, as the script would not honour
// them.
func (d *Driver) PrepareAdd(m *broker.Message) (ScriptAdd, error) {
	stored, err := d.Stored(m)
	if err != nil {
		return ScriptAdd{}, err
	}
	k := d.keys(m.Queue)
	return ScriptAdd{StreamKey: k.stream, Group: d.cfg.Group, Stored: stored, SignalKey: k.wake}, nil
}

// Stored returns the form in which the driver keeps m in its queue's stream
// (the value of the entry's field "m"), for an application script that adds
// m itself, under the rules of PrepareAdd. The script must add it to the
// stream of m.Queue (StreamKey(m.Queue)), which nothing here can check:
// prefer PrepareAdd, which returns both.
func (d *Driver) Stored(m *broker.Message) (string, error) {
	if m == nil {
		return "", fmt.Errorf("stream: stored: %w", &broker.MessageError{Field: "message", Reason: "nil"})
	}
	if err := broker.ValidateMessage(m); err != nil {
		return "", fmt.Errorf("stream: stored: %w", err)
	}
	if m.UniqueKey != "" {
		return "", fmt.Errorf("stream: stored: %w", &broker.MessageError{ID: m.ID, Field: "UniqueKey", Reason: "only Enqueue holds unique keys"})
	}
	if !m.RunAt.IsZero() {
		return "", fmt.Errorf("stream: stored: %w", &broker.MessageError{ID: m.ID, Field: "RunAt", Reason: "only Enqueue delays messages"})
	}
	if m.Group != "" {
		return "", fmt.Errorf("stream: stored: %w", &broker.MessageError{ID: m.ID, Field: "Group", Reason: "only Enqueue admits messages to a group"})
	}
	return string(codec.Encode(m, 0)), nil
}

// StreamKey returns the key of queue's stream, <prefix>:{<queue>}:stream:
// for an application that reads the stream (its length, say), or a script
// that adds messages itself (see PrepareAdd, which matches it to the
// message's queue).
func (d *Driver) StreamKey(queue string) (string, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return "", fmt.Errorf("stream: stream key: %w", err)
	}
	return d.keys(queue).stream, nil
}

// Group returns the consumer group every consumer of the driver joins
// (Config.Group), which an application script creates with the stream (see
// PrepareAdd).
func (d *Driver) Group() string { return d.cfg.Group }
