package list

import (
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Timers through internal/timers (embedded in
// Driver): timers live in the queue's delayed ZSET and timers HASH, and
// promotion LPUSHes them to the back of the ready list, which wakes a
// blocked Fetch.
// It lists each queue's cron series (broker.CronLister) from the index
// internal/timers' fire.lua keeps.
var (
	_ broker.Timers     = (*Driver)(nil)
	_ broker.CronLister = (*Driver)(nil)
)

func (d *Driver) timerMethods() *timers.Methods {
	return &timers.Methods{
		Name:   "list",
		Client: d.client,
		Keys: func(queue string) (timers.Keys, timers.Target) {
			k := d.keys(queue)
			return k.timers, k.promoteTo
		},
		Stored: stored,
	}
}
