// Package limits holds what the list and stream drivers share about
// fleet-wide concurrency limits (broker.Limiter): the keys of a queue's
// limits, and the Lua helpers (lua/lib.lua) their scripts put in front of
// their own text to take a slot when a job is fetched, park a job that
// finds its limit full, and give the slot back, letting the next job in,
// when the delivery ends.
//
// docs/redis-keys.md describes the keys; docs/concurrency.md the behaviour.
package limits

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Lib is the Lua text every script that takes or gives back slots starts
// with, after internal/timers' lib (bulk, CHUNK) and internal/groups' lib
// (group_message_id).
//
//go:embed lua/lib.lua
var Lib string

// Keys are the limit keys of one queue.
type Keys struct {
	Max   string // HASH class ("" the queue, else a kind) -> limit
	State string // HASH class -> "<held>,<last seq>"
	Of    string // HASH holder (a delivery) -> "<q><kind>": the slots it holds
	Wait  string // ZSET "<len(class)>:<class><seq>", score 0: the lines
	Msgs  string // HASH line member -> stored message of a waiting job
	Jobs  string // HASH job ID -> line member of a waiting job
}

// QueueKeys lays out the limit keys of queue under prefix.
func QueueKeys(prefix, queue string) Keys {
	q := keys.Queue(prefix, queue)
	return Keys{
		Max: q.Part("limits"), State: q.Part("limit_state"), Of: q.Part("limit_of"),
		Wait: q.Part("limit_wait"), Msgs: q.Part("limit_msgs"), Jobs: q.Part("limit_jobs"),
	}
}

// List returns the keys in the order the scripts take them (limit_keys).
func (k Keys) List() []string { return []string{k.Max, k.State, k.Of, k.Wait, k.Msgs, k.Jobs} }

var (
	//go:embed lua/set.lua
	setLua string
	//go:embed lua/show.lua
	showLua string

	lib        = timers.Lib + groups.Lib + Lib
	setScript  = script.New("limits.set", setLua, lib)
	showScript = script.New("limits.show", showLua, lib)
)

// Target names where jobs let in go: the queue's ready structure, its kind
// ("list" or "stream"), the stream's consumer group, and its wake signal.
type Target struct {
	Ready, Mode, Group, Wake string
}

// Set sets queue's limit of class kind ("" the queue's own) to n (0
// removes it), and lets in the waiting jobs it has room for, a bounded
// batch per call. Arguments are checked with broker.ValidateLimit.
func Set(ctx context.Context, c script.Processor, k Keys, to Target, queue, kind string, n int) error {
	if err := broker.ValidateLimit(queue, kind, n); err != nil {
		return err
	}
	ks := append(k.List(), to.Ready, to.Wake)
	done := int64(0)
	for {
		v, err := setScript.Run(ctx, c, ks, kind, n, to.Mode, to.Group, done)
		if err != nil {
			return fmt.Errorf("conveyor: limit: %w", err)
		}
		r, ok := v.([]any)
		if !ok || len(r) != 2 {
			return fmt.Errorf("conveyor: limit: set.lua replied %v", v)
		}
		let, _ := r[0].(int64)
		left, _ := r[1].(int64)
		// A full batch let in, and jobs still wait: the limit may have room
		// for more, less what was let in (no slot is held for it yet).
		if let < letInMax || left == 0 {
			return nil
		}
		done += let
	}
}

// letInMax is lib.lua's LET_IN_MAX.
const letInMax = 1000

// Show returns queue's limits, the queue's own first, then by kind.
func Show(ctx context.Context, c script.Processor, k Keys) ([]broker.Limit, error) {
	v, err := showScript.Run(ctx, c, k.List())
	if err != nil {
		return nil, fmt.Errorf("conveyor: limits: %w", err)
	}
	r, ok := v.([]any)
	if !ok || len(r)%4 != 0 {
		return nil, fmt.Errorf("conveyor: limits: show.lua replied %T", v)
	}
	out := make([]broker.Limit, 0, len(r)/4)
	for i := 0; i < len(r); i += 4 {
		kind, _ := r[i].(string)
		max, _ := r[i+1].(int64)
		held, _ := r[i+2].(int64)
		waiting, _ := r[i+3].(int64)
		out = append(out, broker.Limit{Kind: kind, Max: int(max), Running: held, Waiting: waiting})
	}
	slices.SortFunc(out, func(a, b broker.Limit) int { return strings.Compare(a.Kind, b.Kind) })
	return out, nil
}
