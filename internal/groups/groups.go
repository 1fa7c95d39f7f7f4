// Package groups holds what the list and stream drivers share about FIFO
// groups (broker.Message.Group): the keys of a queue's groups, and the Lua
// helpers (lua/lib.lua) their scripts put in front of their own text to
// admit a grouped job, hold it in its group's line, and let the next one in
// when a job ends.
//
// A group admits at most its limit of jobs at once; the others wait outside
// the queue, in enqueue order, and each job that ends lets the next one in
// at the back of the queue. Admission lasts from enqueue (or leaving the
// line) to the job's end (ack, discard, poison, cancel), across its
// retries and crash recoveries, so one job of a group runs at a time, in
// order, across the fleet, and groups take turns.
//
// docs/redis-keys.md describes the keys; docs/ordering.md the behaviour.
package groups

import (
	_ "embed"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Lib is the Lua text every script that admits or releases grouped jobs
// starts with, after internal/timers' lib (it needs bulk and CHUNK).
//
//go:embed lua/lib.lua
var Lib string

// Keys are the group keys of one queue.
type Keys struct {
	Jobs  string // HASH job ID -> "a<group>" (admitted) or "w<member>" (waiting)
	State string // HASH group -> "<admitted>,<limit>"; "\x01"+group, "\x02"+group -> head and last place
	Wait  string // ZSET of lines stored the older way, read only to convert them
	Msgs  string // HASH line member "<len(group)>:<group><place>" -> stored message of a waiting job
}

// QueueKeys lays out the group keys of queue under prefix.
func QueueKeys(prefix, queue string) Keys {
	q := keys.Queue(prefix, queue)
	return Keys{Jobs: q.Part("group_jobs"), State: q.Part("groups"), Wait: q.Part("group_wait"), Msgs: q.Part("group_msgs")}
}

// List returns the keys in the order the scripts take them (group_keys).
func (k Keys) List() []string { return []string{k.Jobs, k.State, k.Wait, k.Msgs} }

// Limit is the limit the scripts get for m: GroupLimit, 1 when unset.
func Limit(m *broker.Message) int {
	return max(m.GroupLimit, 1)
}
