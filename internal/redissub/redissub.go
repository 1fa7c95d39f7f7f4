// Package redissub holds what every Redis subscription of Conveyor's
// watchers does alike: subscribe and wait for Redis to confirm each
// channel, under a bounded wait, then hand each message to the watcher
// until its context ends.
package redissub

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// confirmTimeout bounds the wait for a subscription's confirmations:
// go-redis reads them under a deadline, not under ctx, and a server or
// proxy that never answers must not hang the caller.
const confirmTimeout = 5 * time.Second

// Open subscribes to channels and returns once Redis confirmed each one, so
// that a message published after Open returned is received. The wait is
// bounded by ctx's deadline and 5 seconds. go-redis reconnects the
// subscription by itself afterwards; messages published meanwhile are lost.
func Open(ctx context.Context, rdb redis.UniversalClient, channels ...string) (*redis.PubSub, error) {
	ps := rdb.Subscribe(ctx, channels...)
	wait := confirmTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	for range channels {
		if _, err := ps.ReceiveTimeout(ctx, wait); err != nil {
			_ = ps.Close()
			return nil, err
		}
	}
	return ps, nil
}

// Serve hands each message of ps to handle until ctx ends, handle returns
// false or the subscription is closed, then closes ps. Run it in its own
// goroutine.
func Serve(ctx context.Context, ps *redis.PubSub, handle func(*redis.Message) bool) {
	defer ps.Close()
	in := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-in:
			if !ok || !handle(m) {
				return
			}
		}
	}
}
