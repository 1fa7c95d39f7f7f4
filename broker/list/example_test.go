package list_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/exampleredis"
	"github.com/conveyorq/conveyor/worker"
)

// The list driver under a client and a worker pool: at-least-once, FIFO.
// Check tells at start-up what would make the driver fail later: a Redis
// older than 7.0, an ACL that refuses a command it sends.
func ExampleNew() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Check(ctx); err != nil {
		log.Fatal(err)
	}

	sent := make(chan string, 1)
	mux := worker.NewMux()
	mux.HandleFunc("email.welcome", func(ctx context.Context, job *conveyor.Job) error {
		sent <- string(job.Payload)
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Queue: "emails"})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "emails"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "email.welcome", []byte("ada@example.com"), nil); err != nil {
		log.Fatal(err)
	}

	select {
	case to := <-sent:
		fmt.Println("welcome sent to", to)
	case <-time.After(5 * time.Second):
		log.Fatal("nothing sent within 5s")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// welcome sent to ada@example.com
}

// MaxLen caps what a queue holds (ready, delayed and in flight together):
// past it, Enqueue stores nothing and fails with ErrQueueFull, so a
// producer learns that its consumers are behind.
func ExampleConfig_maxLen() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx := context.Background()

	d, err := list.New(rdb, &list.Config{Prefix: prefix, MaxLen: 2})
	if err != nil {
		log.Fatal(err)
	}
	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		_, err := client.Enqueue(ctx, "export.csv", nil, nil)
		switch {
		case errors.Is(err, conveyor.ErrQueueFull):
			fmt.Printf("job %d refused: the queue is full\n", i)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("job %d stored\n", i)
		}
	}
	// Output:
	// job 1 stored
	// job 2 stored
	// job 3 refused: the queue is full
}

// The driver without a worker pool: a consumer fetches leased deliveries
// in the order they were enqueued and settles them in one script call.
// A delivery not settled before its visibility timeout runs out is
// delivered again.
func ExampleDriver_Open() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	err = d.Enqueue(ctx, []*broker.Message{
		{ID: "1", Kind: "email", Queue: "mail", Payload: []byte("first")},
		{ID: "2", Kind: "email", Queue: "mail", Payload: []byte("second")},
		{ID: "3", Kind: "email", Queue: "mail", Payload: []byte("third")},
	})
	if err != nil {
		log.Fatal(err)
	}

	c, err := d.Open(ctx, "mail", &broker.ConsumerOptions{VisibilityTimeout: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	var ds []*broker.Delivery
	for len(ds) < 3 { // Fetch returns 1 to max deliveries, and blocks while there are none
		got, err := c.Fetch(ctx, 3-len(ds))
		if err != nil {
			log.Fatal(err)
		}
		ds = append(ds, got...)
	}
	for _, dv := range ds {
		fmt.Printf("%s: %s, attempt %d\n", dv.ID, dv.Payload, dv.Attempt())
	}
	if err := c.Ack(ctx, ds...); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 1: first, attempt 1
	// 2: second, attempt 1
	// 3: third, attempt 1
}
