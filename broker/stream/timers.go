package stream

import (
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Timers through internal/timers (embedded in
// Driver): timers live in the queue's delayed ZSET and timers HASH, and
// promotion XADDs them to the stream (creating it and its group when
// missing), which wakes a blocked XREADGROUP.
// It lists each queue's cron series (broker.CronLister) from the index
// internal/timers' fire.lua keeps.
var (
	_ broker.Timers     = (*Driver)(nil)
	_ broker.CronLister = (*Driver)(nil)
)

func (d *Driver) timerMethods() *timers.Methods {
	return &timers.Methods{
		Name:   "stream",
		Client: d.rdb,
		Keys: func(queue string) (timers.Keys, timers.Target) {
			k := d.keys(queue)
			return k.timers, timers.Target{Key: k.stream, Stream: true, Group: d.cfg.Group, Wake: k.wake}
		},
		Stored: func(m *broker.Message, now time.Time) []byte {
			if m.EnqueuedAt.IsZero() {
				c := *m
				c.EnqueuedAt = now
				return codec.Encode(&c, 0)
			}
			return codec.Encode(m, 0)
		},
	}
}
