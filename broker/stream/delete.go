package stream

import (
	_ "embed"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/script"
)

// The driver implements broker.QueueDeleter with internal/inspect's
// Deleter: lua/delete.lua counts the queue's jobs and DELs the keys this
// file names, the stream and its groups included (refusing while any group
// of the stream has an entry pending, unless forced), then the Deleter
// SCANs for the keys whose names hold data and removes the queue from the
// registry. docs/inspector.md says what it costs.
var _ broker.QueueDeleter = (*Driver)(nil)

var (
	//go:embed lua/delete.lua
	deleteLua    string
	deleteScript = script.New("stream/delete", deleteLua)
)

// deleter returns internal/inspect's Deleter on the driver's keys.
func (d *Driver) deleter() *inspect.Deleter {
	return &inspect.Deleter{
		Name: "stream", Client: d.rdb, Prefix: d.cfg.Prefix, Script: deleteScript,
		Call: func(q string) ([]string, []any) {
			k := d.keys(q)
			return []string{k.stream, k.delayed, k.timers.Timers, k.dead, k.deadDropped, k.deadExpired, k.stats,
				k.reclaimed, k.wake, k.reclaim, k.prune, k.paused, k.keeper, k.heir, k.heir + ":baton", k.canceled,
				k.records.Done, k.records.At, k.records.Counts, k.groups.Jobs, k.groups.State, k.groups.Wait, k.groups.Msgs,
				k.limits.Max, k.limits.State, k.limits.Of, k.limits.Wait, k.limits.Msgs, k.limits.Jobs, k.history,
				k.timers.CronSeries}, []any{d.cfg.Group}
		},
		Forget: d.reg.Forget,
	}
}
