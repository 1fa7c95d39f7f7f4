package worker_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/worker"
)

// One pool over three queues by weight: while all have jobs, 6 of every 10
// jobs started are critical's, 3 default's and 1 low's, and low never holds
// more than 2 at once. Handlers are routed by kind, whatever the queue.
func ExampleConfig_queues() {
	rdb := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:6379",
		// An idle pool holds up to 2 connections blocked per queue (its
		// fetch's wait and its keeper election's), beside the commands of
		// running jobs.
		PoolSize: 32,
	})
	d, err := list.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := worker.NewMux()
	mux.HandleFunc("report.render", func(ctx context.Context, job *conveyor.Job) error {
		log.Printf("job %s from queue %s", job.ID, job.Queue)
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{
		Queues:           map[string]int{"critical": 6, "default": 3, "low": 1},
		QueueConcurrency: map[string]int{"low": 2},
		Concurrency:      20,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := pool.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
