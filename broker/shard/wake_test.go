package shard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/brokertest"
	"github.com/conveyorq/conveyor/broker/shard"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestBusyConsumerGivesWakeUpBack: consumer A of a 2-partition queue
// fetched once (its partitions now sleep in Redis) and then stopped
// fetching, as a pool whose workers are all busy does; consumer B waits in
// Fetch. A job stored wakes A's sleep first (Redis serves the longest
// blocked), and A gives the wake-up back, so B fetches the job at once
// rather than when a keeper would look.
func TestBusyConsumerGivesWakeUpBack(t *testing.T) {
	t.Parallel()
	if redistest.IsCluster() {
		t.Skip("counts blocked clients with CLIENT LIST on one server")
	}
	for _, driver := range []string{"list", "stream"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prefix := redistest.Prefix(t)
			redistest.Client(t) // fails the test, saying how to start one, when Redis is not there
			opts0, _, err := redistest.Options()
			if err != nil {
				t.Fatal(err)
			}
			o := *opts0
			o.ClientName = prefix // CLIENT LIST tells this test's connections apart
			rdb := redis.NewUniversalClient(&o)
			t.Cleanup(func() { _ = rdb.Close() })
			in := innerDriver(t, driver, rdb, prefix)
			d, err := shard.New(in, shard.Config{Queues: map[string]int{"q": 2}})
			if err != nil {
				t.Fatal(err)
			}
			opts := &broker.ConsumerOptions{Kept: true}
			a := brokertest.Open(t, d, "q", opts)
			b := brokertest.Open(t, d, "q", opts)

			// blocked counts the clients blocked on q's wake signals.
			blocked := func() int {
				n := 0
				for _, l := range strings.Split(rdb.ClientList(ctx).Val(), "\n") {
					if strings.Contains(l, "name="+prefix+" ") && strings.Contains(l, "cmd=bzpopmin") {
						n++
					}
				}
				return n
			}
			base := blocked()
			short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
			if _, err := a.Fetch(short, 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("A's Fetch on the empty queue = %v, want its deadline", err)
			}
			stop()
			redistest.Eventually(t, "A's 2 partitions asleep in Redis", func() bool { return blocked() >= base+2 })

			got := make(chan []*broker.Delivery, 1)
			go func() {
				ds, _ := b.Fetch(ctx, 1)
				got <- ds
			}()
			redistest.Eventually(t, "B's 2 partitions asleep in Redis", func() bool { return blocked() >= base+4 })
			m := brokertest.NewMessage("q", 1)
			brokertest.Enqueue(t, d, m)
			select {
			case ds := <-got:
				if len(ds) != 1 || ds[0].ID != m.ID {
					t.Fatalf("B fetched %v, want [%s]", brokertest.IDs(ds), m.ID)
				}
				if err := b.Ack(ctx, ds...); err != nil {
					t.Fatal(err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("B did not fetch the job within 3s: A's sleep kept the wake-up")
			}
		})
	}
}
