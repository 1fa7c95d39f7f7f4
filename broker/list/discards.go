package list

import (
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Discards through internal/discards (embedded
// in Driver): a queue's discard records live in its dead LIST, newest
// first, with Config.DiscardMax and Config.DiscardMaxAge as retention, and
// a re-drive LPUSHes each message to the back of the ready list (its next
// delivery's count one up, attempt and recoveries 0), which wakes a blocked
// Fetch.
var _ broker.Discards = (*Driver)(nil)

func (d *Driver) discardKeeper() *discards.Keeper {
	return &discards.Keeper{
		Name:   "list",
		Client: d.client,
		Keys: func(queue string) (discards.Keys, timers.Target) {
			k := d.keys(queue)
			return k.discards, k.promoteTo
		},
		Retention: discards.Retention{Max: d.cfg.DiscardMax, MaxAge: d.cfg.DiscardMaxAge},
	}
}
