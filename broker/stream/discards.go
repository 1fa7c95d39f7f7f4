package stream

import (
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Discards through internal/discards (embedded
// in Driver): a queue's discard records live in its dead LIST, newest
// first, with Config.DiscardMax and Config.DiscardMaxAge as retention, and
// a re-drive XADDs each message to the stream (creating it and its group
// when missing; attempt and recoveries 0), which wakes a blocked
// XREADGROUP.
var _ broker.Discards = (*Driver)(nil)

func (d *Driver) discardKeeper() *discards.Keeper {
	return &discards.Keeper{
		Name:   "stream",
		Client: d.rdb,
		Keys: func(queue string) (discards.Keys, timers.Target) {
			k := d.keys(queue)
			return k.discards, timers.Target{Key: k.stream, Stream: true, Group: d.cfg.Group, Wake: k.wake}
		},
		Retention: discards.Retention{Max: d.cfg.DiscardMax, MaxAge: d.cfg.DiscardMaxAge},
	}
}
