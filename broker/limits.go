package broker

import (
	"context"
	"fmt"
)

// MaxLimit caps a concurrency limit (Limiter.SetLimit).
const MaxLimit = 1_000_000

// Limiter is the side of a driver whose Capabilities has Limits: fleet-wide
// concurrency limits, per queue and per kind of job, kept in Redis so that
// every process of the fleet obeys the same ones.
//
// A job takes a slot of each limit that applies to it (its queue's, its
// kind's) when a consumer fetches it, and gives them back when its
// delivery ends: Ack, Discard, Retry, Postpone, Release, or a reclaim of
// its expired lease, so a killed worker's slots come back with its leases,
// within the visibility timeout. A job that a fetch finds over a limit is
// not delivered: it waits in the limit's line, outside the queue, without
// counting an attempt and without anyone polling for it, until a slot of
// that limit comes back and lets it in.
type Limiter interface {
	// SetLimit sets how many jobs of kind (all jobs of the queue when kind
	// is "") may run at once across the fleet, from 1 to MaxLimit; n = 0
	// removes the limit and lets its waiting jobs in. A raised limit lets
	// waiting jobs in at once. Jobs already running keep their slots: a
	// lowered limit takes effect as they end.
	SetLimit(ctx context.Context, queue, kind string, n int) error
	// Limits reports the queue's limits, and each limit's slots held and
	// jobs waiting, the queue's own (Kind "") first, then by kind.
	Limits(ctx context.Context, queue string) ([]Limit, error)
}

// Limit describes one concurrency limit of a queue (Limiter.Limits).
type Limit struct {
	// Kind is the kind of job the limit applies to; "" for the whole
	// queue.
	Kind string `json:"kind"`
	// Max is the limit; 0 when it was removed while slots were still held
	// or jobs still waited.
	Max int `json:"max"`
	// Running counts the slots held: deliveries in flight under it.
	Running int64 `json:"running"`
	// Waiting counts the jobs waiting in its line for a slot.
	Waiting int64 `json:"waiting"`
}

// ValidateLimit checks SetLimit's arguments.
func ValidateLimit(queue, kind string, n int) error {
	if err := ValidateQueue(queue); err != nil {
		return err
	}
	if kind != "" {
		if reason := checkName(kind); reason != "" {
			return fmt.Errorf("conveyor: invalid limit: kind %q: %s", kind, reason)
		}
	}
	if n < 0 || n > MaxLimit {
		return fmt.Errorf("conveyor: invalid limit: %d is out of range: from 1 to %d, or 0 to remove the limit", n, MaxLimit)
	}
	return nil
}
