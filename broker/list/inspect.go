package list

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Inspector on its keys: ready is the ready
// LIST, in flight the lease ZSET (the messages in the inflight HASH),
// delayed the timers (internal/timers),
// discarded the discard list (internal/discards). The embedded
// internal/inspect Inspector does what the durable drivers do alike; the
// driver hands it the ready LIST and the lease ZSET. Ready jobs come
// next-to-run first, in-flight ones earliest lease deadline first; FindJob
// walks the ready list or the lease ZSET 1,000 messages per script call,
// O(n) in all. docs/inspector.md says what each call costs.
var _ broker.Inspector = (*Driver)(nil)

var (
	//go:embed lua/inspect_sizes.lua
	inspectSizesLua string
	//go:embed lua/inspect_page.lua
	inspectPageLua string
	//go:embed lua/inspect_find.lua
	inspectFindLua string
	//go:embed lua/inspect_purge.lua
	inspectPurgeLua string

	inspectSizesScript = script.New("list.inspect_sizes", inspectSizesLua, timers.Lib+discards.Lib+inspect.Lib)
	inspectPageScript  = script.New("list.inspect_page", inspectPageLua)
	inspectFindScript  = script.New("list.inspect_find", inspectFindLua)
	inspectPurgeScript = script.New("list.inspect_purge", inspectPurgeLua, lib)
)

// inspector returns internal/inspect's Inspector on the driver's keys.
func (d *Driver) inspector() *inspect.Inspector {
	return &inspect.Inspector{
		Name: "list", Client: d.client, Prefix: d.cfg.Prefix, Timers: d.Methods, Discards: d.Keeper, Records: d.Records,
		SizesScript: inspectSizesScript,
		SizesCall: func(q string, maxAge int64) ([]string, []any) {
			k := d.keys(q)
			return []string{k.ready, k.lease, k.delayed, k.dead, k.dropped, k.expired, k.stats, k.groups.Msgs, k.limits.Wait}, []any{maxAge}
		},
		Page:      d.inspectPage,
		FindStep:  d.inspectFind,
		PurgeStep: d.inspectPurge,
	}
}

// inspectPage is one inspect_page.lua call.
func (d *Driver) inspectPage(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	k := d.keys(queue)
	v, err := inspectPageScript.Run(ctx, d.client, []string{k.ready, k.lease, k.inflight}, state.String(), offset, limit)
	if err != nil {
		return nil, 0, err
	}
	r, ok := v.([]any)
	if !ok || len(r)%2 != 1 {
		return nil, 0, errors.New("unexpected reply")
	}
	total, _ := r[0].(int64)
	out := make([]*broker.JobInfo, 0, len(r)/2)
	for i := 1; i+1 < len(r); i += 2 {
		out = append(out, d.job(queue, state, r[i], r[i+1]))
	}
	return out, total, nil
}

// job decodes a stored message and its lease deadline (in flight) from a
// script reply.
func (d *Driver) job(queue string, state broker.JobState, v, score any) *broker.JobInfo {
	s, _ := v.(string)
	j := inspect.Decode(queue, state, []byte(s))
	if ms, _ := score.(int64); state == broker.JobInFlight && ms > 0 {
		j.LeaseDeadline = time.UnixMilli(ms)
	}
	return j
}

// inspectFind is one inspect_find.lua call; its cursor is the position to
// go on from.
func (d *Driver) inspectFind(ctx context.Context, queue string, state broker.JobState, id, cursor string) (*broker.JobInfo, string, error) {
	off := 0
	if cursor != "" {
		off, _ = strconv.Atoi(cursor)
	}
	k := d.keys(queue)
	v, err := inspectFindScript.Run(ctx, d.client, []string{k.ready, k.lease, k.inflight}, state.String(), id, off, inspect.Step)
	if err != nil {
		return nil, "", err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		return nil, "", fmt.Errorf("unexpected reply %v", v)
	}
	if s, _ := r[0].(string); s != "" {
		return d.job(queue, state, s, r[1]), "", nil
	}
	next, _ := r[2].(int64)
	if next < 0 {
		return nil, "", nil
	}
	return nil, strconv.FormatInt(next, 10), nil
}

// inspectPurge is one inspect_purge.lua call.
func (d *Driver) inspectPurge(ctx context.Context, queue string, n int) (int64, int64, error) {
	k := d.keys(queue)
	v, err := inspectPurgeScript.Run(ctx, d.client, slices.Concat([]string{k.ready, k.wake}, k.groups.List(), k.limits.List()), n)
	if err != nil {
		return 0, 0, err
	}
	return inspect.PurgeReply(v)
}
