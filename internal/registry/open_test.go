package registry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/registry"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRegistryFailureIsNotFatal: when the registry cannot be written (here
// its key holds a string; in production an ACL without SADD), consumers
// still open and enqueues still store their jobs; the driver warns once and
// does not send the SADD again on every call.
func TestRegistryFailureIsNotFatal(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"list", "stream"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb := redistest.NewClient(t)
			prefix := redistest.Prefix(t)
			if err := rdb.Set(ctx, registry.Key(prefix), "not a set", 0).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				rdb.Del(context.Background(), registry.Key(prefix), prefix+":{q2}:ready", prefix+":{q2}:stream")
			})
			logs := &lockedBuffer{}
			logger := slog.New(slog.NewTextHandler(logs, nil))
			var d broker.Driver
			var err error
			if name == "list" {
				d, err = list.New(rdb, &list.Config{Prefix: prefix, Logger: logger})
			} else {
				d, err = stream.New(rdb, &stream.Config{Prefix: prefix, Logger: logger})
			}
			if err != nil {
				t.Fatal(err)
			}
			log := &drivertest.CmdLog{}
			rdb.AddHook(log)
			c, err := d.Open(ctx, "q", nil)
			if err != nil {
				t.Fatalf("Open with an unwritable registry: %v", err)
			}
			defer func() { _ = c.Close(ctx) }()
			client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "q2"})
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				if _, err := client.Enqueue(ctx, "k", nil, nil); err != nil {
					t.Fatalf("Enqueue with an unwritable registry: %v", err)
				}
			}
			if n := strings.Count(logs.String(), "could not add queues to the registry"); n != 1 {
				t.Errorf("%d registry warnings, want 1 (then a pause): %s", n, logs.String())
			}
			if sadds := log.Count("sadd"); sadds != 1 {
				t.Errorf("%d SADDs sent, want 1 (then a pause)", sadds)
			}
			if n, err := rdb.LLen(ctx, prefix+":{q2}:ready").Result(); name == "list" && (err != nil || n != 5) {
				t.Errorf("ready jobs of q2: %d (%v), want 5", n, err)
			}
			if n, err := rdb.XLen(ctx, prefix+":{q2}:stream").Result(); name == "stream" && (err != nil || n != 5) {
				t.Errorf("stream entries of q2: %d (%v), want 5", n, err)
			}
		})
	}
}
