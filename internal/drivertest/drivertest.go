// Package drivertest serves Conveyor's own tests: the durable drivers each
// test of a pool, a promoter or a middleware runs on, a way to run such a
// component in the background for the length of a test, a log of the
// commands a client sends (CmdLog), and a buffer several goroutines may
// write to (Buffer).
package drivertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Driver builds one durable driver.
type Driver struct {
	Name string
	// Open builds the driver on rdb with every key under prefix.
	Open func(rdb redis.UniversalClient, prefix string) (broker.Driver, error)
	// ReadyKey is where the driver keeps a queue's ready messages (of a
	// whole queue, or of one partition).
	ReadyKey func(prefix, queue string) string
	// Partitions, when over 1, is how many partitions Open's driver (a
	// shard.Driver) splits every queue into.
	Partitions int
}

// Sharded are the durable drivers behind a shard.Driver that leaves every
// queue whole (1 partition) and one that splits every queue into 6.
var Sharded = []Driver{sharded(Durable[0], 1), sharded(Durable[1], 1), sharded(Durable[0], 6), sharded(Durable[1], 6)}

func sharded(d Driver, n int) Driver {
	open := d.Open
	d.Name = fmt.Sprintf("%s-shard%d", d.Name, n)
	d.Partitions = n
	d.Open = func(rdb redis.UniversalClient, prefix string) (broker.Driver, error) {
		in, err := open(rdb, prefix)
		if err != nil {
			return nil, err
		}
		return shard.New(in, shard.Config{Partitions: n})
	}
	return d
}

// Parts returns the queues queue is stored in: its partitions, or queue
// itself.
func (d Driver) Parts(queue string) []string { return shard.PartitionNames(queue, d.Partitions) }

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

// Named returns the durable driver called name, sharded or not.
func Named(name string) (Driver, bool) {
	for _, d := range append(slices.Clone(Durable), Sharded...) {
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

// ReadyLen returns how many messages wait in a queue's ready structures
// (of each partition).
func (d Driver) ReadyLen(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (int64, error) {
	var sum int64
	for _, p := range d.Parts(queue) {
		k := d.ReadyKey(prefix, p)
		var n int64
		var err error
		if strings.HasPrefix(d.Name, "stream") {
			n, err = rdb.XLen(ctx, k).Result()
		} else {
			n, err = rdb.LLen(ctx, k).Result()
		}
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
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
