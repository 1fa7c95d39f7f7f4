// Package keys builds every Redis key Conveyor uses, so the layout lives in
// one place (docs/redis-keys.md describes it).
//
// Every key of a queue is <prefix>:{<queue>}:<part>. The braces are a Redis
// Cluster hash tag: all keys of one queue hash to one slot, so a script may
// touch any of them, and no script spans two queues.
package keys

import (
	"fmt"
	"strings"

	"github.com/conveyorq/conveyor/broker"
)

// DefaultPrefix starts every key unless a driver is configured otherwise.
const DefaultPrefix = "conveyor"

// ValidatePrefix reports whether p can start a key: non-empty, without
// braces (which would become the hash tag), spaces or control characters.
func ValidatePrefix(p string) error {
	if err := broker.ValidateQueue(p); err != nil {
		return fmt.Errorf("conveyor: invalid key prefix %q", p)
	}
	return nil
}

// Queue returns the key builder for one queue.
func Queue(prefix, queue string) QueueKeys {
	return QueueKeys{base: prefix + ":{" + queue + "}:"}
}

// QueueKeys builds the keys of one queue.
type QueueKeys struct{ base string }

// Part returns the key <prefix>:{<queue>}:<part>.
func (q QueueKeys) Part(part string) string { return q.base + part }

// Base returns <prefix>:{<queue>}:, the start every key of the queue shares.
func (q QueueKeys) Base() string { return q.base }

// Channel returns the pub/sub channel of a queue; it shares the layout so
// that ACLs with a key/channel pattern of <prefix>:* cover it.
func Channel(prefix, queue string) string { return Queue(prefix, queue).Part("ch") }

// HasPrefix reports whether key belongs to prefix.
func HasPrefix(key, prefix string) bool { return strings.HasPrefix(key, prefix+":") }
