package stream_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/exampleredis"
	"github.com/conveyorq/conveyor/worker"
)

// The stream driver under a client and a worker pool: each queue is a
// Redis stream read through a consumer group, at-least-once. Check tells
// at start-up what would make the driver fail later: a Redis older than
// 7.0, an ACL that refuses a command it sends.
func ExampleNew() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := stream.New(rdb, &stream.Config{Prefix: prefix, Group: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Check(ctx); err != nil {
		log.Fatal(err)
	}

	type Invoice struct {
		Number string `json:"number"`
	}
	issued := make(chan string, 1)
	mux := worker.NewMux()
	worker.HandleJSON(mux, "invoice.issue", func(ctx context.Context, job *conveyor.Job, inv Invoice) error {
		issued <- inv.Number
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Queue: "invoices"})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "invoices"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "invoice.issue", Invoice{Number: "2026-0042"}, nil); err != nil {
		log.Fatal(err)
	}

	select {
	case n := <-issued:
		fmt.Println("invoice", n, "issued")
	case <-time.After(5 * time.Second):
		log.Fatal("no invoice issued within 5s")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// invoice 2026-0042 issued
}

// An application's own Lua script that adds a job to a queue atomically
// with its own writes: PrepareAdd gives it the keys and the stored form of
// the message. Jobs added so are fetched, retried and discarded like any
// other.
func ExampleDriver_PrepareAdd() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := stream.New(rdb, &stream.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}

	// buy takes one item of a flash sale's stock and enqueues the order in
	// the same script, so no order is enqueued without its item, nor an item
	// taken without its order. On a Redis Cluster every key must hash to
	// the queue's slot: the stock key carries the queue's hash tag, {orders}.
	//
	// KEYS[1]  the sale's stock (STRING, items left)
	// KEYS[2]  the queue's stream (ScriptAdd.StreamKey)
	// KEYS[3]  the queue's wake signal (ScriptAdd.SignalKey)
	// ARGV[1]  the consumer group (ScriptAdd.Group)
	// ARGV[2]  the stored order (ScriptAdd.Stored)
	// Reply: the items left after this order, or -1 when sold out.
	buy := redis.NewScript(`
local left = tonumber(redis.call('GET', KEYS[1]) or '0')
if left <= 0 then return -1 end
redis.call('DECR', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
end
redis.call('XADD', KEYS[2], '*', 'm', ARGV[2])
redis.call('ZADD', KEYS[3], 0, 'w')
return left - 1
`)
	stock := prefix + ":{orders}:stock"
	if err := rdb.Set(ctx, stock, 1, 0).Err(); err != nil {
		log.Fatal(err)
	}

	for _, user := range []string{"ada", "bob"} {
		add, err := d.PrepareAdd(&broker.Message{
			ID: "order-" + user, Kind: "order.create", Queue: "orders",
			Payload: []byte(user), EnqueuedAt: time.Now(),
		})
		if err != nil {
			log.Fatal(err)
		}
		left, err := buy.Run(ctx, rdb, []string{stock, add.StreamKey, add.SignalKey}, add.Group, add.Stored).Int()
		if err != nil {
			log.Fatal(err)
		}
		if left < 0 {
			fmt.Println(user, "is too late: sold out")
			continue
		}
		fmt.Println(user, "bought one,", left, "left")
	}

	created := make(chan string, 1)
	mux := worker.NewMux()
	mux.HandleFunc("order.create", func(ctx context.Context, job *conveyor.Job) error {
		created <- fmt.Sprintf("%s for %s", job.ID, job.Payload)
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Queue: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	select {
	case s := <-created:
		fmt.Println("created", s)
	case <-time.After(5 * time.Second):
		log.Fatal("no order created within 5s")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// ada bought one, 0 left
	// bob is too late: sold out
	// created order-ada for ada
}
