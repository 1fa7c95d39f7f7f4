package discards

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Keeper implements broker.Discards for a driver that keeps its discard
// records in this package's layout. A driver embeds it, so the methods are
// written once for the list and the stream driver. (It is not called
// Methods, as the drivers embed timers.Methods too.)
type Keeper struct {
	// Name starts every error ("list", "stream").
	Name string
	// Client is the driver's Redis client.
	Client redis.UniversalClient
	// Keys returns a queue's discard keys and where its re-driven messages
	// go (the same target as promoted timers).
	Keys func(queue string) (Keys, timers.Target)
	// Retention is the driver's retention.
	Retention Retention
}

var _ broker.Discards = (*Keeper)(nil)

func (x *Keeper) keys(op, queue string) (Keys, timers.Target, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return Keys{}, timers.Target{}, fmt.Errorf("%s: %s: %w", x.Name, op, err)
	}
	k, t := x.Keys(queue)
	return k, t, nil
}

func (x *Keeper) wrap(op, queue string, err error) error {
	return fmt.Errorf("%s: %s of %q: %w", x.Name, op, queue, err)
}

// ints reads the leading integers of a script reply.
func ints(v any, n int) ([]int64, []any, bool) {
	r, ok := v.([]any)
	if !ok || len(r) < n {
		return nil, nil, false
	}
	out := make([]int64, n)
	for i := range n {
		if out[i], ok = r[i].(int64); !ok {
			return nil, nil, false
		}
	}
	return out, r[n:], true
}

// ListDiscarded returns a page of queue's records, newest first, after
// enforcing the age limit.
func (x *Keeper) ListDiscarded(ctx context.Context, queue string, offset, limit int) ([]*broker.Discarded, int64, error) {
	k, _, err := x.keys("list discarded", queue)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 || limit < 1 {
		return nil, 0, fmt.Errorf("%s: list discarded: offset %d, limit %d: want offset >= 0 and limit >= 1", x.Name, offset, limit)
	}
	for range maxSteps {
		v, err := pageScript.Run(ctx, x.Client, []string{k.Dead, k.Expired}, x.Retention.AgeArg(), offset, min(limit, MaxPage))
		if err != nil {
			return nil, 0, x.wrap("list discarded", queue, err)
		}
		head, recs, ok := ints(v, 2)
		if !ok {
			return nil, 0, x.wrap("list discarded", queue, fmt.Errorf("unexpected reply %v", v))
		}
		if head[0] >= AgeStep {
			continue // more may be past the age limit: drop them first
		}
		out := make([]*broker.Discarded, 0, len(recs))
		for _, r := range recs {
			s, _ := r.(string)
			out = append(out, Decode(queue, []byte(s)))
		}
		return out, head[1], nil
	}
	return nil, 0, x.wrap("list discarded", queue, fmt.Errorf("age retention did not finish"))
}

// GetDiscarded returns the newest record of message id in queue, nil when
// there is none.
func (x *Keeper) GetDiscarded(ctx context.Context, queue, id string) (*broker.Discarded, error) {
	k, _, err := x.keys("get discarded", queue)
	if err != nil {
		return nil, err
	}
	if err := validID(id); err != nil {
		return nil, fmt.Errorf("%s: get discarded: %w", x.Name, err)
	}
	off := int64(0)
	for range maxSteps {
		v, err := findScript.Run(ctx, x.Client, []string{k.Dead, k.Expired}, x.Retention.AgeArg(), id, off, WalkPage)
		if err != nil {
			return nil, x.wrap("get discarded", queue, err)
		}
		r, ok := v.([]any)
		if !ok || len(r) != 3 {
			return nil, x.wrap("get discarded", queue, fmt.Errorf("unexpected reply %v", v))
		}
		rec, _ := r[1].(string)
		next, _ := r[2].(int64)
		switch {
		case rec != "":
			return Decode(queue, []byte(rec)), nil
		case next < 0:
			return nil, nil
		}
		// Positions count from the newest record: the age limit, which drops
		// from the oldest end, moves none; records discarded meanwhile push
		// the others further, so a stretch may look at one twice, never skip
		// one.
		off = next
	}
	return nil, x.wrap("get discarded", queue, fmt.Errorf("did not finish"))
}

// Redrive moves the records f selects back to the ready structure, oldest
// first, at most max (0: all), attempt and recoveries reset to 0.
func (x *Keeper) Redrive(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	return x.walk(ctx, "redrive", queue, f, max)
}

// PurgeDiscarded deletes the records f selects, oldest first, at most max
// (0: all).
func (x *Keeper) PurgeDiscarded(ctx context.Context, queue string, f broker.DiscardFilter, max int) (int, error) {
	return x.walk(ctx, "purge", queue, f, max)
}

// walk runs walk.lua page by page until the walk ends or max records were
// acted on.
func (x *Keeper) walk(ctx context.Context, mode, queue string, f broker.DiscardFilter, most int) (int, error) {
	k, to, err := x.keys(mode, queue)
	if err != nil {
		return 0, err
	}
	if most < 0 {
		return 0, fmt.Errorf("%s: %s: max %d is negative", x.Name, mode, most)
	}
	if f.ID != "" {
		if err := validID(f.ID); err != nil {
			return 0, fmt.Errorf("%s: %s: %w", x.Name, mode, err)
		}
	}
	if err := x.expire(ctx, k); err != nil {
		return 0, x.wrap(mode, queue, err)
	}
	into := "list"
	if to.Stream {
		into = "stream"
	}
	kind := KindArg(f.Kind)
	done, start, cursor := 0, int64(0), ""
	for range maxSteps {
		page := WalkPage
		if most > 0 {
			page = min(page, most-done)
		}
		v, err := walkScript.Run(ctx, x.Client, to.Keys(k.Dead),
			mode, into, to.Group, f.ID, kind, page, WalkPage, start, cursor)
		if err != nil {
			return done, x.wrap(mode, queue, err)
		}
		r, ok := v.([]any)
		if !ok || len(r) != 4 {
			return done, x.wrap(mode, queue, fmt.Errorf("unexpected reply %v", v))
		}
		n, _ := r[0].(int64)
		end, _ := r[1].(int64)
		start, _ = r[2].(int64)
		cursor, _ = r[3].(string)
		done += int(n)
		if end == 1 || (most > 0 && done >= most) {
			return done, nil
		}
	}
	return done, x.wrap(mode, queue, fmt.Errorf("stopped after %d pages", maxSteps))
}

// expire drops every record past the age limit, a bounded step at a time.
func (x *Keeper) expire(ctx context.Context, k Keys) error {
	if x.Retention.MaxAge < 0 {
		return nil
	}
	for range maxSteps {
		v, err := expireScript.Run(ctx, x.Client, []string{k.Dead, k.Expired}, x.Retention.AgeArg())
		if err != nil {
			return err
		}
		if n, _ := v.(int64); n < AgeStep {
			return nil
		}
	}
	return fmt.Errorf("age retention did not finish")
}

// DiscardStats returns the figures of queue's discard list after enforcing
// the age limit.
func (x *Keeper) DiscardStats(ctx context.Context, queue string) (broker.DiscardStats, error) {
	k, _, err := x.keys("discard stats", queue)
	if err != nil {
		return broker.DiscardStats{}, err
	}
	for range maxSteps {
		v, err := statsScript.Run(ctx, x.Client, []string{k.Dead, k.Dropped, k.Expired}, x.Retention.AgeArg())
		if err != nil {
			return broker.DiscardStats{}, x.wrap("discard stats", queue, err)
		}
		r, _, ok := ints(v, 5)
		if !ok {
			return broker.DiscardStats{}, x.wrap("discard stats", queue, fmt.Errorf("unexpected reply %v", v))
		}
		if r[0] >= AgeStep {
			continue
		}
		s := broker.DiscardStats{
			Count: r[1], DroppedByCount: r[2], DroppedByAge: r[3],
			MaxCount: x.Retention.Max, MaxAge: x.Retention.MaxAge,
		}
		if r[4] >= 0 {
			s.Oldest = time.UnixMilli(r[4])
		}
		return s, nil
	}
	return broker.DiscardStats{}, x.wrap("discard stats", queue, fmt.Errorf("age retention did not finish"))
}

func validID(id string) error {
	m := broker.Message{ID: id, Kind: "discarded", Queue: "q"}
	return broker.ValidateMessage(&m)
}
