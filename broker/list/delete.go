package list

import (
	_ "embed"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/script"
)

// The driver implements broker.QueueDeleter with internal/inspect's
// Deleter: lua/delete.lua counts the queue's jobs and DELs the keys this
// file names (refusing while the lease ZSET holds a job, unless forced),
// then the Deleter SCANs for the keys whose names hold data and removes
// the queue from the registry. docs/inspector.md says what it costs.
var _ broker.QueueDeleter = (*Driver)(nil)

var (
	//go:embed lua/delete.lua
	deleteLua    string
	deleteScript = script.New("list.delete", deleteLua)
)

// deleter returns internal/inspect's Deleter on the driver's keys.
func (d *Driver) deleter() *inspect.Deleter {
	return &inspect.Deleter{
		Name: "list", Client: d.client, Prefix: d.cfg.Prefix, Script: deleteScript,
		Call: func(q string) ([]string, []any) {
			k := d.keys(q)
			return []string{k.ready, k.lease, k.inflight, k.delayed, k.timers.Timers, k.dead, k.dropped, k.expired,
				k.stats, k.reclaimed, k.wake, k.paused, k.keeper, k.heir, k.heir + ":baton", k.canceled,
				k.records.Done, k.records.At, k.records.Counts, k.groups.Jobs, k.groups.State, k.groups.Wait, k.groups.Msgs,
				k.limits.Max, k.limits.State, k.limits.Of, k.limits.Wait, k.limits.Msgs, k.limits.Jobs, k.history,
				k.timers.CronSeries}, nil
		},
		Forget: d.reg.Forget,
	}
}
