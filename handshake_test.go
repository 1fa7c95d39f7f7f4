package conveyor_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestEnqueueAfterFailedHandshakeFails: a client whose connection set-up is
// refused (a database out of range, an unknown ACL user, a wrong password) gets an error from
// its very first Enqueue, which runs in a pipeline with the queue's
// registration, and nothing is stored.
func TestEnqueueAfterFailedHandshakeFails(t *testing.T) {
	t.Parallel()
	if redistest.IsCluster() {
		t.Skip("SELECT and a second client's options are single-server settings; the cluster run covers the drivers, not the handshake")
	}
	good := redistest.Client(t)
	opts, _, err := redistest.Options()
	if err != nil {
		t.Fatal(err)
	}
	// A wrong password needs a user that has one: an ACL user of a server
	// of the test's own, so that no user is added to the shared server.
	own := redistest.StartServer(t)
	ownClient := own.Client(t)
	if err := ownClient.Do(context.Background(), "ACL", "SETUSER", "conveyor-hs", "on", ">right", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	type badSetUp struct {
		mod  func(o *redis.Options)
		good redis.UniversalClient // where to look for what a failed enqueue stored
	}
	bad := map[string]badSetUp{
		"db99":        {func(o *redis.Options) { o.DB = 99 }, good},
		"unknownuser": {func(o *redis.Options) { o.Username, o.Password = "conveyor-no-such-user", "x" }, good},
		"wrongpassword": {func(o *redis.Options) {
			o.Addr, o.DB, o.TLSConfig, o.Username, o.Password = own.Addr, 0, nil, "conveyor-hs", "wrong"
		}, ownClient},
	}
	drivers := map[string]func(rdb redis.UniversalClient, prefix string) (broker.Driver, error){
		"list": func(rdb redis.UniversalClient, prefix string) (broker.Driver, error) {
			return list.New(rdb, &list.Config{Prefix: prefix})
		},
		"stream": func(rdb redis.UniversalClient, prefix string) (broker.Driver, error) {
			return stream.New(rdb, &stream.Config{Prefix: prefix})
		},
	}
	reqs := map[string][]conveyor.Request{
		"plain":   {{Kind: "k"}},
		"delayed": {{Kind: "k", Opts: &conveyor.EnqueueOptions{Delay: time.Hour}}},
		"many":    {{Kind: "k"}, {Kind: "k", Opts: &conveyor.EnqueueOptions{Queue: "other"}}},
	}
	for bn, b := range bad {
		for dn, newDriver := range drivers {
			for rn, rs := range reqs {
				t.Run(bn+"/"+dn+"/"+rn, func(t *testing.T) {
					t.Parallel()
					o := &redis.Options{Addr: opts.Addrs[0], DB: opts.DB, Username: opts.Username, Password: opts.Password, TLSConfig: opts.TLSConfig}
					b.mod(o)
					rdb := redis.NewClient(o)
					t.Cleanup(func() { _ = rdb.Close() })
					prefix := redistest.Prefix(t)
					d, err := newDriver(rdb, prefix)
					if err != nil {
						t.Fatal(err)
					}
					c, err := conveyor.NewClient(d, nil)
					if err != nil {
						t.Fatal(err)
					}
					msgs, err := c.EnqueueMany(context.Background(), rs...)
					if err == nil {
						t.Fatalf("first EnqueueMany through a refused handshake returned nil (%d messages)", len(msgs))
					}
					if keys := redistest.Keys(t, b.good, prefix); len(keys) != 0 {
						t.Fatalf("a failed enqueue stored %v", keys)
					}
				})
			}
		}
	}
}
