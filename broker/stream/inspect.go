package stream

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/groups"
	"github.com/conveyorq/conveyor/internal/inspect"
	"github.com/conveyorq/conveyor/internal/limits"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/timers"
)

// The driver implements broker.Inspector on its keys: ready are the
// stream's entries after the group's last-delivered-id, in flight those in
// the group's pending list, delayed the timers (internal/timers),
// discarded the discard list (internal/discards). lua/inspect_lib.lua says
// why the stream holds nothing else. The embedded internal/inspect
// Inspector does what the durable drivers do alike; the driver hands it
// the stream and the group's pending list. Ready and in-flight jobs come
// oldest entry first (ready: the order they are fetched in); their pages
// cost O(offset + limit), as a stream has no index by position; FindJob
// walks the state's part of the stream 1,000 entries per script call, O(n)
// in all. docs/inspector.md says what each call costs.
var _ broker.Inspector = (*Driver)(nil)

var (
	//go:embed lua/inspect_lib.lua
	inspectLib string
	//go:embed lua/inspect_sizes.lua
	inspectSizesSrc string
	//go:embed lua/inspect_page.lua
	inspectPageSrc string
	//go:embed lua/inspect_find.lua
	inspectFindSrc string
	//go:embed lua/inspect_purge.lua
	inspectPurgeSrc string

	inspectSizesScript = script.New("stream/inspect_sizes", inspectSizesSrc, timers.Lib+discards.Lib+inspect.Lib+inspectLib)
	inspectPageScript  = script.New("stream/inspect_page", inspectPageSrc, timers.Lib+lib+inspectLib)
	inspectFindScript  = script.New("stream/inspect_find", inspectFindSrc, timers.Lib+lib+inspectLib)
	inspectPurgeScript = script.New("stream/inspect_purge", inspectPurgeSrc, timers.Lib+groups.Lib+limits.Lib+lib+inspectLib)
)

// inspector returns internal/inspect's Inspector on the driver's keys.
func (d *Driver) inspector() *inspect.Inspector {
	return &inspect.Inspector{
		Name: "stream", Client: d.rdb, Prefix: d.cfg.Prefix, Timers: d.Methods, Discards: d.Keeper, Records: d.Records,
		SizesScript: inspectSizesScript,
		SizesCall: func(q string, maxAge int64) ([]string, []any) {
			k := d.keys(q)
			return []string{k.stream, k.delayed, k.dead, k.deadDropped, k.deadExpired, k.stats, k.groups.Msgs, k.limits.Wait}, []any{d.cfg.Group, maxAge}
		},
		Page:      d.inspectPage,
		FindStep:  d.inspectFind,
		PurgeStep: d.inspectPurge,
	}
}

// inspectPage calls inspect_page.lua until it has skipped offset entries
// and returns the page.
func (d *Driver) inspectPage(ctx context.Context, queue string, state broker.JobState, offset, limit int) ([]*broker.JobInfo, int64, error) {
	k := d.keys(queue)
	cursor, skip := "", int64(offset)
	for range inspect.MaxSteps {
		v, err := inspectPageScript.Run(ctx, d.rdb, []string{k.stream}, d.cfg.Group, state.String(), cursor, skip, limit)
		if err != nil {
			return nil, 0, err
		}
		r, ok := v.([]any)
		if !ok || len(r) < 4 || (len(r)-4)%5 != 0 {
			return nil, 0, errors.New("unexpected reply")
		}
		total, _ := r[0].(int64)
		now, _ := r[1].(int64)
		cursor, _ = r[2].(string)
		skip, _ = r[3].(int64)
		if skip > 0 {
			continue
		}
		out := make([]*broker.JobInfo, 0, (len(r)-4)/5)
		for i := 4; i+4 < len(r); i += 5 {
			out = append(out, d.job(queue, state, now, r[i+1:i+5]))
		}
		return out, total, nil
	}
	return nil, 0, fmt.Errorf("stopped after %d steps", inspect.MaxSteps)
}

// job decodes an entry from a script reply: consumer, idle time, delivery
// count, stored message. now is the server's time (unix ms).
func (d *Driver) job(queue string, state broker.JobState, now int64, f []any) *broker.JobInfo {
	consumer, _ := f[0].(string)
	idle, _ := f[1].(int64)
	count, _ := f[2].(int64)
	body, _ := f[3].(string)
	j := inspect.Decode(queue, state, []byte(body))
	if state == broker.JobInFlight {
		j.Consumer = consumer
		if idle >= 0 {
			j.LeasedAt = time.UnixMilli(now - idle)
		}
		// As a fetch counts them: a delivery count above 1 means earlier
		// leases of this entry expired.
		if count > 1 && j.Raw == nil {
			j.Recoveries += int(count - 1)
		}
	}
	return j
}

// inspectFind is one inspect_find.lua call; its cursor is the last entry
// ID it looked at.
func (d *Driver) inspectFind(ctx context.Context, queue string, state broker.JobState, id, cursor string) (*broker.JobInfo, string, error) {
	v, err := inspectFindScript.Run(ctx, d.rdb, []string{d.keys(queue).stream}, d.cfg.Group, state.String(), id, cursor, inspect.Step)
	if err != nil {
		return nil, "", err
	}
	r, ok := v.([]any)
	if !ok || len(r) < 3 {
		return nil, "", fmt.Errorf("unexpected reply %v", v)
	}
	now, _ := r[1].(int64)
	if found, _ := r[0].(int64); found == 1 {
		if len(r) != 7 {
			return nil, "", fmt.Errorf("unexpected reply %v", v)
		}
		return d.job(queue, state, now, r[3:7]), "", nil
	}
	next, _ := r[2].(string)
	return nil, next, nil
}

// inspectPurge is one inspect_purge.lua call.
func (d *Driver) inspectPurge(ctx context.Context, queue string, n int) (int64, int64, error) {
	k := d.keys(queue)
	v, err := inspectPurgeScript.Run(ctx, d.rdb, slices.Concat([]string{k.stream, k.wake}, k.groups.List(), k.limits.List()), d.cfg.Group, n)
	if err != nil {
		return 0, 0, err
	}
	return inspect.PurgeReply(v)
}
