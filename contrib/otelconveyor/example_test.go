package otelconveyor_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/contrib/otelconveyor"
	"github.com/conveyorq/conveyor/worker"
)

// Tracing both sides of a queue: the client's enqueue gives a PRODUCER
// span, the pool's run of the job a CONSUMER span linked to it. A program
// would give Config an SDK tracer provider with its exporter; here a
// SpanRecorder keeps the spans to print them.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	prefix := "example-" + rand.Text() // keys of this run only
	defer deleteKeys(rdb, prefix)
	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tel, err := otelconveyor.New(&otelconveyor.Config{TracerProvider: tp}) // nil: the global providers
	if err != nil {
		log.Fatal(err)
	}

	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{
		DefaultQueue: "emails",
		Middleware:   []conveyor.EnqueueMiddleware{tel.EnqueueMiddleware()},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "email.send", []byte(`{"to":"ada@example.com"}`), nil); err != nil {
		log.Fatal(err)
	}

	ran := make(chan struct{})
	mux := worker.NewMux()
	mux.HandleFunc("email.send", func(ctx context.Context, job *conveyor.Job) error {
		close(ran)
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{
		Queue:      "emails",
		Middleware: []conveyor.Middleware{tel.Middleware()}, // first: outermost
		OnPromote:  tel.OnPromote,
	})
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- pool.Run(ctx) }()
	<-ran
	// Shutdown returns once Run has: the job is settled and its span ended.
	if err := pool.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	if err := <-stopped; err != nil {
		log.Fatal(err)
	}

	// The client's span ended before the pool started, so it comes first.
	spans := rec.Ended()
	for _, s := range spans {
		fmt.Println(s.Name(), s.SpanKind())
	}
	if len(spans) == 2 {
		send, process := spans[0], spans[1]
		links := process.Links()
		fmt.Println("linked:", len(links) == 1 && links[0].SpanContext.SpanID() == send.SpanContext().SpanID())
	}
	// Output:
	// send emails producer
	// process emails consumer
	// linked: true
}

// deleteKeys deletes the keys under prefix: the example's own, never the
// database's others.
func deleteKeys(rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			log.Print(err)
		}
	}
	if err := iter.Err(); err != nil {
		log.Print(err)
	}
}
