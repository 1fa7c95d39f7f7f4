// Package discards holds what the list and stream drivers share about
// discard queues: the keys of a queue's discard list, the Lua helpers
// their discarding scripts put in front of their own text (a record's
// format, retention by count and by age), and the scripts that list, find,
// count, re-drive and purge records. Keeper implements broker.Discards on
// them; the drivers embed it. Only where a re-driven message goes differs
// between the drivers, and walk.lua takes that as an argument.
//
// docs/redis-keys.md describes the keys and the record format.
package discards

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Lib is the Lua text every script that adds discard records starts with
// (see lua/lib.lua): discard_list, discard_push and discard_retain enforce
// the retention. It needs nothing in front of it.
//
//go:embed lua/lib.lua
var Lib string

var (
	//go:embed lua/expire.lua
	expireLua string
	//go:embed lua/page.lua
	pageLua string
	//go:embed lua/find.lua
	findLua string
	//go:embed lua/stats.lua
	statsLua string
	//go:embed lua/walk.lua
	walkLua string

	// internal/timers' lib gives now_ms and bulk.
	expireScript = script.New("discards.expire", expireLua, timers.Lib+Lib)
	pageScript   = script.New("discards.page", pageLua, timers.Lib+Lib)
	findScript   = script.New("discards.find", findLua, timers.Lib+Lib)
	statsScript  = script.New("discards.stats", statsLua, timers.Lib+Lib)
	walkScript   = script.New("discards.walk", walkLua, timers.Lib+Lib)
)

// Limits of one script call; each keeps the server's pause short.
const (
	// MaxPage caps the records one ListDiscarded call returns.
	MaxPage = 1000
	// WalkPage caps the records one walk.lua or find.lua call looks at.
	WalkPage = 1000
	// AgeStep is how many records one call drops for age at most (as
	// DISCARD_AGE_STEP in lua/lib.lua).
	AgeStep = 100
	// maxSteps bounds the script calls of one Go call that walks the list:
	// far beyond any list the retention allows.
	maxSteps = 1 << 16
)

// Keys are the discard keys of one queue.
type Keys struct {
	Queue   string
	Dead    string // LIST of discard records, newest first
	Dropped string // STRING count of records the count cap dropped
	Expired string // STRING count of records the age limit dropped
}

// QueueKeys lays out the discard keys of queue under prefix.
func QueueKeys(prefix, queue string) Keys {
	q := keys.Queue(prefix, queue)
	return Keys{Queue: queue, Dead: q.Part("dead"), Dropped: q.Part("dead_dropped"), Expired: q.Part("dead_expired")}
}

// Retention is a driver's discard retention after its config's defaults
// are applied.
type Retention struct {
	// Max caps the records of a queue, >= 1.
	Max int
	// MaxAge drops records older than it; negative: no age limit.
	MaxAge time.Duration
}

// CheckRetention applies the defaults to a driver config's DiscardMax and
// DiscardMaxAge (0: the default; a negative age: no age limit) and
// validates them.
func CheckRetention(max int, maxAge time.Duration) (Retention, error) {
	r := Retention{Max: max, MaxAge: maxAge}
	switch {
	case r.Max == 0:
		r.Max = broker.DefaultDiscardMax
	case r.Max < 0:
		return r, fmt.Errorf("DiscardMax %d is negative", max)
	}
	switch {
	case r.MaxAge == 0:
		r.MaxAge = broker.DefaultDiscardMaxAge
	case r.MaxAge > 0 && r.MaxAge < time.Millisecond:
		return r, fmt.Errorf("DiscardMaxAge %v is under 1ms", maxAge)
	}
	return r, nil
}

// AgeArg is MaxAge as the scripts take it: milliseconds, -1 for no limit.
func (r Retention) AgeArg() int64 {
	if r.MaxAge < 0 {
		return -1
	}
	return r.MaxAge.Milliseconds()
}

// KindArg is kind as the message body encodes it, which walk.lua compares
// with: its uvarint length, then its bytes. "" stays "" (any kind).
func KindArg(kind string) string {
	if kind == "" {
		return ""
	}
	b := binary.AppendUvarint(nil, uint64(len(kind)))
	return string(append(b, kind...))
}

// Decode turns a record of queue into a broker.Discarded. It never fails:
// what cannot be decoded is kept in Raw.
func Decode(queue string, rec []byte) *broker.Discarded {
	out := &broker.Discarded{Message: broker.Message{Queue: queue}}
	d, err := codec.DecodeDiscarded(rec)
	if err != nil {
		out.Raw = rec
		return out
	}
	out.Reason, out.DiscardedAt = d.Reason, d.At
	if _, err := codec.Decode(d.Message, &out.Message); err != nil {
		out.Message = broker.Message{Queue: queue}
		if h, _, herr := codec.ParseHeader(d.Message); herr == nil {
			out.ID, out.Retries, out.Recoveries = h.ID, h.Retries, h.Recoveries
		}
		out.Raw = d.Message
		return out
	}
	out.Queue = queue
	return out
}
