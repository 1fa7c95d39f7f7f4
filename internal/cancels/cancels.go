// Package cancels holds what the list and stream drivers share to cancel a
// job by ID (broker.Canceler): the marks of cancelled in-flight deliveries
// (a bounded ZSET per queue, lua/lib.lua), the channel their cancels are
// published on, the subscription that watches it, and the order in which a
// job is looked for.
//
// docs/redis-keys.md describes the keys ({q}:canceled, {q}:cancels).
package cancels

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redischeck"
	"github.com/conveyorq/conveyor/internal/redissub"
)

// Lib is the Lua text of mark_canceled and canceled_among (see
// lua/lib.lua). It needs internal/timers' Lib in front of it.
//
//go:embed lua/lib.lua
var Lib string

// Marks returns the key of queue's marks of cancelled deliveries.
func Marks(prefix, queue string) string { return keys.Queue(prefix, queue).Part("canceled") }

// Channel returns the pub/sub channel on which the IDs of queue's jobs
// cancelled in flight are published.
func Channel(prefix, queue string) string { return keys.Queue(prefix, queue).Part("cancels") }

// Needs are the commands the scripts send on the marks key and the channel,
// for a driver's Check.
func Needs(marks, ch string) []redischeck.Need {
	return []redischeck.Need{
		redischeck.Key(marks, "ZADD", marks, "NX", "0", "m"),
		redischeck.Key(marks, "ZREMRANGEBYSCORE", marks, "0", "0"),
		redischeck.Key(marks, "ZREMRANGEBYRANK", marks, "0", "0"),
		redischeck.Key(marks, "ZCARD", marks),
		redischeck.Key(marks, "ZMSCORE", marks, "m"),
		redischeck.Key(marks, "ZREM", marks, "m"),
		redischeck.Key(marks, "EXISTS", marks),
		redischeck.Key(marks, "PEXPIRE", marks, "1"),
		redischeck.Channel(ch, "PUBLISH", "m"),
		redischeck.Channel(ch, "SUBSCRIBE"),
	}
}

// Step looks for job id of queue in one stretch of state (broker.JobReady
// or broker.JobInFlight) from cursor ("" to start) and cancels it there
// when it finds it, in one script call: a ready job is removed, an
// in-flight delivery marked. It reports whether it found the job and the
// cursor to go on from ("": the state ends within this stretch).
type Step func(ctx context.Context, queue, id string, state broker.JobState, cursor string) (found bool, next string, err error)

// looks bounds the passes over the states: a job that moved back (a retry
// to a timer, a hand-back to ready) while one pass walked past it is found
// by the next.
const looks = 2

// Cancel cancels job id of queue through t (a pending timer) and step (a
// ready job, then an in-flight one: the order a job moves in, so one
// moving ahead as it is looked for is found in the next state), and
// reports the state it was cancelled in; 0 when none held it.
func Cancel(ctx context.Context, t broker.Timers, step Step, queue, id string) (broker.JobState, error) {
	if id == "" {
		return 0, fmt.Errorf("cancel: empty job ID: %w", broker.ErrInvalidMessage)
	}
	for range looks {
		ok, err := t.Cancel(ctx, queue, id)
		if err != nil {
			return 0, err
		}
		if ok {
			return broker.JobDelayed, nil
		}
		for _, st := range [...]broker.JobState{broker.JobReady, broker.JobInFlight} {
			cursor := ""
			for {
				found, next, err := step(ctx, queue, id, st, cursor)
				if err != nil {
					return 0, err
				}
				if found {
					return st, nil
				}
				if next == "" {
					break
				}
				cursor = next
			}
		}
	}
	return 0, nil
}

// Watch subscribes to the cancel channels of queues under prefix and
// returns the jobs cancelled in flight as they are published, until ctx
// ends (the channel is then closed). The subscription reconnects by itself
// (go-redis); notices published meanwhile are lost.
func Watch(ctx context.Context, rdb redis.UniversalClient, prefix string, queues ...string) (<-chan broker.CanceledJob, error) {
	if len(queues) == 0 {
		return nil, fmt.Errorf("watch cancels: no queue")
	}
	byChannel := make(map[string]string, len(queues))
	chans := make([]string, 0, len(queues))
	for _, q := range queues {
		if err := broker.ValidateQueue(q); err != nil {
			return nil, err
		}
		ch := Channel(prefix, q)
		byChannel[ch] = q
		chans = append(chans, ch)
	}
	ps, err := redissub.Open(ctx, rdb, chans...)
	if err != nil {
		return nil, fmt.Errorf("watch cancels: %w", err)
	}
	out := make(chan broker.CanceledJob, 64)
	go func() {
		defer close(out)
		redissub.Serve(ctx, ps, func(m *redis.Message) bool {
			q, known := byChannel[m.Channel]
			member, id, ok := strings.Cut(m.Payload, "\n")
			if !known || !ok || id == "" {
				return true
			}
			select {
			case out <- broker.CanceledJob{Queue: q, ID: id, Delivery: member}:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out, nil
}
