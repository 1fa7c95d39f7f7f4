// Package inspect holds what the list and stream drivers share in
// implementing broker.Inspector: Inspector, which checks every call's
// arguments, reads the queue registry and serves the states both drivers
// keep alike (delayed: internal/timers; discarded: internal/discards); the
// Lua helper that reads a queue's discard figures and counters; the
// decoding of stored messages into job infos; and the Go loops that drive
// bounded script calls. Deleter deletes a queue (broker.QueueDeleter) with
// a driver's delete script. Only the ready and in-flight structures differ
// between the drivers: each driver hands Inspector and Deleter its own.
//
// docs/inspector.md says what each call costs.
package inspect

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/codec"
	"github.com/conveyorq/conveyor/internal/discards"
	"github.com/conveyorq/conveyor/internal/script"
)

// Lib is the Lua text a driver's sizes script ends its libraries with,
// after internal/timers' and internal/discards' (it uses now_ms,
// discard_expire and discard_time): queue_tail reads the figures both
// drivers keep alike.
//
//go:embed lua/lib.lua
var Lib string

// Limits of one script call.
const (
	// Step caps the entries one find or purge script call looks at or
	// removes, and the entries one page call skips.
	Step = 1000
	// MaxSteps bounds the script calls of one Go call that walks a
	// structure: far beyond any queue (a billion entries).
	MaxSteps = 1 << 20
)

// checkQueue validates a queue name for op.
func checkQueue(op, queue string) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// checkPage validates a page request.
func checkPage(op string, offset, limit int) error {
	if offset < 0 || limit < 1 || limit > broker.MaxInspectPage {
		return fmt.Errorf("%s: offset %d, limit %d: want offset >= 0 and limit 1 to %d", op, offset, limit, broker.MaxInspectPage)
	}
	return nil
}

// checkID validates a job ID for op.
func checkID(op, id string) error {
	m := broker.Message{ID: id, Kind: "job", Queue: "q"}
	if err := broker.ValidateMessage(&m); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// checkState validates a job state for op.
func checkState(op string, s broker.JobState) error {
	if !s.Valid() {
		return fmt.Errorf("%s: %v is not a job state", op, s)
	}
	return nil
}

// checkPurge validates a purge's queue and max for op.
func checkPurge(op, queue string, max int) error {
	if err := checkQueue(op, queue); err != nil {
		return err
	}
	if max < 0 {
		return fmt.Errorf("%s: max %d is negative", op, max)
	}
	return nil
}

// tailLen is how many integers queue_tail returns.
const tailLen = 10

// sizes runs a driver's sizes script once per queue, pipelined in one
// round trip, and decodes each reply: the driver's own leading figures
// (ready, in flight) then queue_tail's. A queue whose call dropped as many
// discard records for age as one call may (more may be due) is read again,
// so no figure counts a record past the age limit.
func sizes(ctx context.Context, rdb redis.UniversalClient, s *script.Script, r discards.Retention,
	queues []string, call func(queue string) ([]string, []any)) ([]broker.QueueSizes, error) {
	out := make([]broker.QueueSizes, len(queues))
	todo := make([]int, len(queues))
	for i, q := range queues {
		if err := broker.ValidateQueue(q); err != nil {
			return nil, err
		}
		todo[i] = i
	}
	for range MaxSteps {
		if len(todo) == 0 {
			return out, nil
		}
		calls := make([]*script.Call, len(todo))
		for j, i := range todo {
			k, a := call(queues[i])
			calls[j] = &script.Call{Keys: k, Args: a}
		}
		s.RunPipelined(ctx, rdb, calls)
		var again []int
		for j, i := range todo {
			c := calls[j]
			if c.Err != nil {
				return nil, fmt.Errorf("sizes of %q: %w", queues[i], c.Err)
			}
			sz, more, err := parseSizes(queues[i], c.Val, r)
			if err != nil {
				return nil, err
			}
			if more {
				again = append(again, i)
			}
			out[i] = sz
		}
		todo = again
	}
	return nil, fmt.Errorf("sizes: age retention did not finish")
}

// parseSizes decodes {ready, in flight, queue_tail...}; more reports that
// the call dropped a full step of discard records for age.
func parseSizes(queue string, v any, r discards.Retention) (broker.QueueSizes, bool, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2+tailLen {
		return broker.QueueSizes{}, false, fmt.Errorf("sizes of %q: unexpected reply %v", queue, v)
	}
	n := make([]int64, len(a))
	for i, x := range a {
		if n[i], ok = x.(int64); !ok {
			return broker.QueueSizes{}, false, fmt.Errorf("sizes of %q: unexpected reply %v", queue, v)
		}
	}
	ready, inFlight, droppedNow, delayed, dead, byCount, byAge, oldest, processed, failed, grouped, limited :=
		n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], n[9], n[10], n[11]
	sz := broker.QueueSizes{
		Queue: queue, Ready: ready, InFlight: inFlight, Delayed: delayed, Discarded: dead, Grouped: grouped, Limited: limited,
		Processed: processed, Failed: failed,
		Discards: broker.DiscardStats{
			Count: dead, DroppedByCount: byCount, DroppedByAge: byAge,
			MaxCount: r.Max, MaxAge: r.MaxAge,
		},
	}
	if oldest >= 0 {
		sz.Discards.Oldest = time.UnixMilli(oldest)
	}
	return sz, droppedNow >= discards.AgeStep, nil
}

// Decode turns a stored message of queue into a job in state. It never
// fails: what cannot be decoded is kept in Raw, with the header's fields
// when the header is readable.
func Decode(queue string, state broker.JobState, stored []byte) *broker.JobInfo {
	j := &broker.JobInfo{State: state}
	if _, err := codec.Decode(stored, &j.Message); err != nil {
		j.Message = broker.Message{}
		if h, _, herr := codec.ParseHeader(stored); herr == nil {
			j.ID, j.Retries, j.Recoveries = h.ID, h.Retries, h.Recoveries
		}
		j.Raw = append([]byte{}, stored...) // non-nil even when empty (an entry gone from the stream)
	}
	j.Queue = queue
	return j
}

// fromDiscarded turns a discard record into a job.
func fromDiscarded(r *broker.Discarded) *broker.JobInfo {
	return &broker.JobInfo{Message: r.Message, State: broker.JobDiscarded, Reason: r.Reason, DiscardedAt: r.DiscardedAt, Raw: r.Raw}
}

// fromTimer turns a pending timer (RunAt set to its due time) into a job.
func fromTimer(m *broker.Message) *broker.JobInfo {
	return &broker.JobInfo{Message: *m, State: broker.JobDelayed}
}

// purge calls step, which deletes up to n entries (n at most Step) and
// reports how many it deleted and how many the structure held before,
// until it deleted max entries (0: as many as the structure held when the
// first step ran, so that producers adding as fast as it deletes cannot
// keep it going) or the structure is empty.
func purge(ctx context.Context, max int, step func(ctx context.Context, n int) (deleted, held int64, err error)) (int, error) {
	done, target := 0, max
	for range MaxSteps {
		n := Step
		if target > 0 {
			n = min(n, target-done)
		}
		if n <= 0 {
			return done, nil
		}
		deleted, held, err := step(ctx, n)
		if err != nil {
			return done, err
		}
		if target == 0 {
			target = int(held)
			if deleted > int64(target) {
				target = int(deleted)
			}
		}
		done += int(deleted)
		if deleted < int64(n) || done >= target {
			return done, nil
		}
	}
	return done, fmt.Errorf("purge stopped after %d steps", MaxSteps)
}

// walk calls step from cursor "" on, each call looking at the next stretch
// of a structure and returning the job it found or the cursor to go on
// from ("" when the structure ends), until a step finds the job or the
// structure ends.
func walk(ctx context.Context, step func(ctx context.Context, cursor string) (*broker.JobInfo, string, error)) (*broker.JobInfo, error) {
	cursor := ""
	for range MaxSteps {
		j, next, err := step(ctx, cursor)
		if err != nil || j != nil || next == "" {
			return j, err
		}
		cursor = next
	}
	return nil, fmt.Errorf("find stopped after %d steps", MaxSteps)
}
