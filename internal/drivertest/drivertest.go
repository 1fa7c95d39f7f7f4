// Package drivertest serves Conveyor's own tests: the durable drivers each
// test of a pool, a promoter or a middleware runs on, a way to run such a
// component in the background for the length of a test, a log of the
// commands a client sends (CmdLog), and a buffer several goroutines may
// write to (Buffer).
package drivertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Driver builds one durable driver.
type Driver struct {
	Name string
	// Open builds the driver on rdb with every key under prefix.
	Open func(rdb redis.UniversalClient, prefix string) (broker.Driver, error)
	// ReadyKey is where the driver keeps a queue's ready messages.
	ReadyKey func(prefix, queue string) string
}

// Durable are the at-least-once drivers: list and stream.
var Durable = []Driver{
	{
		Name: "list",
		Open: func(rdb redis.UniversalClient, prefix string) (broker.Driver, error) {
			return list.New(rdb, &list.Config{Prefix: prefix})
		},
		ReadyKey: func(prefix, queue string) string { return keys.Queue(prefix, queue).Part("ready") },
	},
	{
		Name: "stream",
		Open: func(rdb redis.UniversalClient, prefix string) (broker.Driver, error) {
			return stream.New(rdb, &stream.Config{Prefix: prefix})
		},
		ReadyKey: func(prefix, queue string) string { return keys.Queue(prefix, queue).Part("stream") },
	},
}

// Named returns the durable driver called name.
func Named(name string) (Driver, bool) {
	for _, d := range Durable {
		if d.Name == name {
			return d, true
		}
	}
	return Driver{}, false
}

// Must opens the driver or fails t.
func (d Driver) Must(t testing.TB, rdb redis.UniversalClient, prefix string) broker.Driver {
	t.Helper()
	drv, err := d.Open(rdb, prefix)
	if err != nil {
		t.Fatalf("%s driver: %v", d.Name, err)
	}
	return drv
}

// ReadyLen returns how many messages wait in a queue's ready structure.
func (d Driver) ReadyLen(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (int64, error) {
	k := d.ReadyKey(prefix, queue)
	if d.Name == "stream" {
		return rdb.XLen(ctx, k).Result()
	}
	return rdb.LLen(ctx, k).Result()
}

// Background runs run (a pool's, a promoter's or a cron's Run) until the
// returned stop is called or t ends; stop cancels its context and waits up
// to 30s for it to return, failing t on an error or a hang.
func Background(t testing.TB, run func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return within 30s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
