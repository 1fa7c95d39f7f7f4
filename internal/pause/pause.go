// Package pause keeps the fleet-wide pause state of queues for the list and
// stream drivers: a queue is paused while its key <prefix>:{<queue>}:paused
// exists. Pauser implements broker.Pauser on it; the drivers embed it, and
// each consumer keeps what it knows of the pause in a Seen.
//
// docs/redis-keys.md describes the key.
package pause

import (
	"context"
	"fmt"
	"sync"
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

// Seen is what one consumer knows of its queue's pause: it asks Redis
// (EXISTS of the pause key) at most once per broker.PauseLag, and only when
// it needs to know: when a read returned messages, or while it knows the
// queue paused. An idle consumer so sends nothing for pauses. The zero
// value knows nothing yet. It is safe for concurrent use.
type Seen struct {
	mu     sync.Mutex
	paused bool
	at     time.Time
}

// Known reports whether the queue was paused when last asked.
func (s *Seen) Known() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Hold is a consumer's look before it fetches: when the queue was paused
// when last asked, it asks again (at most once per PauseLag) and, if the
// queue is still paused, calls idle (broker.ConsumerOptions.Idle), waits
// (see Wait) and reports true: the consumer fetches nothing this round.
func (s *Seen) Hold(ctx context.Context, rdb redis.Cmdable, key string, done <-chan struct{}, idle func()) (bool, error) {
	if !s.Known() {
		return false, nil
	}
	p, err := s.Paused(ctx, rdb, key)
	if err != nil || !p {
		return false, err
	}
	idle()
	return true, Wait(ctx, done)
}

// Paused reports whether the queue of pause key key is paused, asking rdb
// when the last answer is PauseLag old or older.
func (s *Seen) Paused(ctx context.Context, rdb redis.Cmdable, key string) (bool, error) {
	s.mu.Lock()
	if !s.at.IsZero() && time.Since(s.at) < broker.PauseLag {
		p := s.paused
		s.mu.Unlock()
		return p, nil
	}
	s.mu.Unlock()
	n, err := rdb.Exists(ctx, key).Result()
	if err != nil {
		return false, fmt.Errorf("is the queue paused: %w", err)
	}
	s.mu.Lock()
	s.paused, s.at = n == 1, time.Now()
	s.mu.Unlock()
	return n == 1, nil
}
