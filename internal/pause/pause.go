// Package pause keeps the fleet-wide pause state of queues for the list and
// stream drivers: a queue is paused while its key <prefix>:{<queue>}:paused
// exists. Pauser implements broker.Pauser on it; the drivers embed it and
// read the key where they fetch (the list driver in fetch.lua, the stream
// driver before its reads, at most once per broker.PauseLag).
//
// docs/redis-keys.md describes the key.
package pause

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Key returns the pause key of queue.
func Key(prefix, queue string) string { return keys.Queue(prefix, queue).Part("paused") }

// Pauser implements broker.Pauser for one key prefix.
type Pauser struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ broker.Pauser = (*Pauser)(nil)

// New returns the pause methods of the queues under prefix.
func New(rdb redis.UniversalClient, prefix string) *Pauser {
	return &Pauser{rdb: rdb, prefix: prefix}
}

// PauseQueue sets queue's pause key (SET, no TTL: a pause lasts until
// ResumeQueue).
func (m *Pauser) PauseQueue(ctx context.Context, queue string) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return fmt.Errorf("pause %q: %w", queue, err)
	}
	if err := m.rdb.Set(ctx, Key(m.prefix, queue), "1", 0).Err(); err != nil {
		return fmt.Errorf("pause %q: %w", queue, err)
	}
	return nil
}

// ResumeQueue deletes queue's pause key.
func (m *Pauser) ResumeQueue(ctx context.Context, queue string) error {
	if err := broker.ValidateQueue(queue); err != nil {
		return fmt.Errorf("resume %q: %w", queue, err)
	}
	if err := m.rdb.Del(ctx, Key(m.prefix, queue)).Err(); err != nil {
		return fmt.Errorf("resume %q: %w", queue, err)
	}
	return nil
}

// QueuePaused reports whether queue's pause key exists.
func (m *Pauser) QueuePaused(ctx context.Context, queue string) (bool, error) {
	if err := broker.ValidateQueue(queue); err != nil {
		return false, fmt.Errorf("paused %q: %w", queue, err)
	}
	n, err := m.rdb.Exists(ctx, Key(m.prefix, queue)).Result()
	if err != nil {
		return false, fmt.Errorf("paused %q: %w", queue, err)
	}
	return n == 1, nil
}

// Wait is a consumer's wait before it looks again at a paused queue:
// broker.PauseLag, or until ctx is done (ctx.Err()) or done is closed (the
// consumer closed: broker.ErrClosed).
func Wait(ctx context.Context, done <-chan struct{}) error {
	t := time.NewTimer(broker.PauseLag)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return broker.ErrClosed
	}
}
