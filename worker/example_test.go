package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/exampleredis"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

// A typed handler: the payload is decoded from JSON once, before the
// function runs. A payload that does not decode is discarded at once, as
// retrying cannot fix it.
func ExampleHandleJSON() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}

	type Order struct {
		ID    string `json:"id"`
		Items int    `json:"items"`
	}
	shipped := make(chan string, 1)
	mux := worker.NewMux()
	worker.HandleJSON(mux, "order.ship", func(ctx context.Context, job *conveyor.Job, o Order) error {
		shipped <- fmt.Sprintf("order %s: %d items shipped", o.ID, o.Items)
		return nil
	})
	discarded := make(chan string, 1)
	pool, err := worker.NewPool(d, mux, &worker.Config{
		OnDiscard: func(ctx context.Context, job *conveyor.Job, reason string) {
			discarded <- fmt.Sprintf("%s discarded after attempt %d: %s", job.Kind, job.Attempt(), reason)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "order.ship", Order{ID: "123", Items: 2}, nil); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "order.ship", []byte("<order id=124/>"), nil); err != nil { // []byte is stored as it is
		log.Fatal(err)
	}

	for _, events := range []chan string{shipped, discarded} {
		select {
		case s := <-events:
			fmt.Println(s)
		case <-time.After(5 * time.Second):
			log.Fatal("no job settled within 5s")
		}
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// order 123: 2 items shipped
	// order.ship discarded after attempt 1: conveyor: cannot decode payload of order.ship into worker_test.Order: invalid character '<' looking for beginning of value
}

// A handler of the raw payload, for jobs that are not JSON.
func ExampleMux_HandleFunc() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan string, 1)
	mux := worker.NewMux()
	mux.HandleFunc("thumbnail.make", func(ctx context.Context, job *conveyor.Job) error {
		got <- fmt.Sprintf("%s: %q", job.Kind, job.Payload)
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Queue: "images"})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Enqueue(ctx, "thumbnail.make", []byte("photos/cat.png"), &conveyor.EnqueueOptions{Queue: "images"})
	if err != nil {
		log.Fatal(err)
	}

	select {
	case s := <-got:
		fmt.Println(s)
	case <-time.After(5 * time.Second):
		log.Fatal("no job ran within 5s")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// thumbnail.make: "photos/cat.png"
}

// Retry rules: a failing job runs again after the policy's delay, and a
// failure of its last attempt discards it. Attempt numbers the runs from 1;
// Retries counts the failed ones.
func ExampleConfig_retry() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	events := make(chan string, 4)
	mux := worker.NewMux()
	mux.HandleFunc("webhook.post", func(ctx context.Context, job *conveyor.Job) error {
		events <- fmt.Sprintf("attempt %d fails (%d retries before it)", job.Attempt(), job.Retries)
		return errors.New("502 bad gateway")
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{
		Retry: &retry.Rules{
			Policy:      retry.Constant(10 * time.Millisecond), // in production: retry.Exponential{...}
			MaxAttempts: 3,
		},
		OnDiscard: func(ctx context.Context, job *conveyor.Job, reason string) {
			events <- fmt.Sprintf("discarded after attempt %d: %s", job.Attempt(), reason)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "webhook.post", nil, nil); err != nil {
		log.Fatal(err)
	}

	for range 4 {
		select {
		case s := <-events:
			fmt.Println(s)
		case <-time.After(5 * time.Second):
			log.Fatal("no event within 5s")
		}
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 fails (0 retries before it)
	// attempt 2 fails (1 retries before it)
	// attempt 3 fails (2 retries before it)
	// discarded after attempt 3: 502 bad gateway
}

// A graceful stop: Shutdown stops fetching and lets running jobs finish
// (for up to ShutdownGrace); a long job can watch Stopping to reach a
// checkpoint early.
func ExamplePool_Shutdown() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx := context.Background()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	var pool *worker.Pool
	started := make(chan struct{})
	mux := worker.NewMux()
	mux.HandleFunc("report.render", func(ctx context.Context, job *conveyor.Job) error {
		close(started)
		select {
		case <-pool.Stopping():
			fmt.Println("stopping: saving a checkpoint and returning")
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	pool, err = worker.NewPool(d, mux, &worker.Config{ShutdownGrace: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "report.render", nil, nil); err != nil {
		log.Fatal(err)
	}
	select {
	case <-started:
		fmt.Println("job started")
	case <-time.After(5 * time.Second):
		log.Fatal("no job started within 5s")
	}

	shutdownCtx, cancel := context.WithTimeout(ctx, 10*time.Second) // past the grace, for the hand-back
	defer cancel()
	if err := pool.Shutdown(shutdownCtx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("Run returned:", <-done)
	// Output:
	// job started
	// stopping: saving a checkpoint and returning
	// Run returned: <nil>
}
