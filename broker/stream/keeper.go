package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/elect"
	"github.com/conveyorq/conveyor/internal/wake"
)

var (
	_ broker.Keeper   = (*Driver)(nil)
	_ broker.Upkeeper = (*Driver)(nil)
)

// Campaign implements broker.Keeper: the election of a queue's keeper
// (internal/elect) on the queue's keys <prefix>:{<queue>}:keeper and
// :keeper_heir. A worker pool campaigns, and only the elected pool of a
// fleet promotes the queue's timers and runs Upkeep.
func (d *Driver) Campaign(ctx context.Context, queue, id string, lead func(ctx context.Context)) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return fmt.Errorf("stream: campaign: %w", err)
	}
	k := d.keys(queue)
	e, err := elect.New(d.rdb, id, elect.Config{Lease: k.keeper, Heir: k.heir, Logger: d.cfg.Logger})
	if err != nil {
		return fmt.Errorf("stream: campaign: %w", err)
	}
	return e.Run(ctx, lead)
}

// Upkeep implements broker.Upkeeper. A stream entry can only be taken over
// by the consumer that will run it, so the keeper does not take expired
// leases itself: it looks for one (XPENDING ... IDLE <vt> - + 1, one
// command, with the shortest visibility timeout of the consumers this
// driver opened) and, when there is one, sets the queue's reclaim signal
// {q}:reclaim (internal/wake). The consumer it wakes runs a takeover pass
// (XAUTOCLAIM); one that takes a full batch wakes the next. It also sets the
// wake signal {q}:wake when entries wait unread (XINFO GROUPS and
// XREVRANGE ... COUNT 1 against the group's last-delivered ID): entries an
// application script added without it reach a consumer within a second.
// Three commands in one round trip; it asks to run again within
// broker.UpkeepEvery.
func (d *Driver) Upkeep(ctx context.Context, queue string) (time.Duration, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return 0, fmt.Errorf("stream: upkeep: %w", err)
	}
	k := d.keys(queue)
	vt := time.Duration(d.minVT.Load())
	if vt <= 0 {
		vt = broker.DefaultVisibilityTimeout
	}
	p := d.rdb.Pipeline()
	pending := p.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: k.stream, Group: d.cfg.Group, Idle: vt, Start: "-", End: "+", Count: 1,
	})
	groups := p.XInfoGroups(ctx, k.stream)
	last := p.XRevRangeN(ctx, k.stream, "+", "-", 1)
	_, _ = p.Exec(ctx) // each command's error is read below
	ps, err := pending.Result()
	switch {
	case err != nil && (errors.Is(err, redis.Nil) || strings.HasPrefix(err.Error(), "NOGROUP") || strings.Contains(err.Error(), "no such key")):
		return broker.UpkeepEvery, nil // no stream yet: nothing in flight
	case err != nil:
		return 0, fmt.Errorf("stream: upkeep: %w", err)
	case len(ps) > 0:
		if err := wake.Signal(ctx, d.rdb, k.reclaim); err != nil {
			return 0, fmt.Errorf("stream: upkeep: %w", err)
		}
	}
	// Entries after the group's last-delivered ID wait to be read: an
	// application script that added them without the wake signal, or a
	// consumer that died after taking the signal, left them without one.
	if undelivered(groups, last, d.cfg.Group) {
		if err := wake.Signal(ctx, d.rdb, k.wake); err != nil {
			return 0, fmt.Errorf("stream: upkeep: %w", err)
		}
	}
	return broker.UpkeepEvery, nil
}

// undelivered reports whether the stream's newest entry (last) comes after
// group's last-delivered ID.
func undelivered(groups *redis.XInfoGroupsCmd, last *redis.XMessageSliceCmd, group string) bool {
	gs, err1 := groups.Result()
	ms, err2 := last.Result()
	if err1 != nil || err2 != nil || len(ms) == 0 {
		return false
	}
	for _, g := range gs {
		if g.Name == group {
			return idAfter(ms[0].ID, g.LastDeliveredID)
		}
	}
	return false
}

// idAfter reports whether stream entry ID a ("<ms>-<seq>") comes after b.
func idAfter(a, b string) bool {
	am, as, ok1 := splitID(a)
	bm, bs, ok2 := splitID(b)
	if !ok1 || !ok2 {
		return false
	}
	return am > bm || (am == bm && as > bs)
}

func splitID(id string) (uint64, uint64, bool) {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return 0, 0, false
	}
	m, err1 := strconv.ParseUint(ms, 10, 64)
	s, err2 := strconv.ParseUint(seq, 10, 64)
	return m, s, err1 == nil && err2 == nil
}
