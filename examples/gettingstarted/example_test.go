package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/contrib/otelconveyor"
	"github.com/conveyorq/conveyor/worker"
)

// These examples are compiled, not run (they have no Output comment): they
// are the guide's blocks that need a Redis of your own or a tracing
// back-end.

// Connecting to your Redis and choosing a driver.
func Example_connect() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	d, err := list.New(rdb, &list.Config{Prefix: "myapp"})
	if err != nil {
		panic(err)
	}
	_ = d
}

// Tracing and metrics through contrib/otelconveyor, on both sides of the queue.
func Example_tracing() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	d, err := list.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	mux := worker.NewMux()

	tel, err := otelconveyor.New(nil) // the global providers, or &otelconveyor.Config{TracerProvider: tp, MeterProvider: mp}
	if err != nil {
		panic(err)
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{
		Middleware: []conveyor.EnqueueMiddleware{tel.EnqueueMiddleware()},
	})
	if err != nil {
		panic(err)
	}
	pool, err := worker.NewPool(d, mux, &worker.Config{
		Middleware: []conveyor.Middleware{tel.Middleware()}, // first: outermost
		OnPromote:  tel.OnPromote,
	})
	if err != nil {
		panic(err)
	}
	_, _ = client, pool
}
