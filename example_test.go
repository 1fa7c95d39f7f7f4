package conveyor_test

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

// Receipt is the payload of the examples' "email.receipt" jobs.
type Receipt struct {
	OrderID string `json:"order_id"`
	Email   string `json:"email"`
}

// A handler, a producer and a worker pool: the job enqueued runs once.
func Example() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}

	sent := make(chan string, 1)
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		sent <- r.OrderID // send the e-mail here; nil acks the job
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Concurrency: 10})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "123", Email: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}

	select {
	case id := <-sent:
		fmt.Println("receipt sent for order", id)
	case <-time.After(5 * time.Second):
		log.Fatal("no receipt sent within 5s")
	}
	stop() // the pool stops fetching, lets running jobs finish, and Run returns
	fmt.Println("pool stopped:", <-done)
	// Output:
	// receipt sent for order 123
	// pool stopped: <nil>
}

// Args become the job's payload as JSON. A delayed job with an ID of your
// own is a timer found by that business key, and the queue holds one
// pending timer per key.
func ExampleClient_Enqueue() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx := context.Background()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "emails"})
	if err != nil {
		log.Fatal(err)
	}

	msg, err := client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "123", Email: "ada@example.com"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(msg.Kind, "in", msg.Queue+":", string(msg.Payload))

	reminder := &conveyor.EnqueueOptions{ID: "order:124:reminder", Delay: 30 * time.Minute}
	msg, err = client.Enqueue(ctx, "email.reminder", Receipt{OrderID: "124"}, reminder)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("timer", msg.ID)

	_, err = client.Enqueue(ctx, "email.reminder", Receipt{OrderID: "124"}, reminder)
	fmt.Println("same timer again refused:", errors.Is(err, conveyor.ErrDuplicate))
	// Output:
	// email.receipt in emails: {"order_id":"123","email":"ada@example.com"}
	// timer order:124:reminder
	// same timer again refused: true
}

// Several jobs in one round trip. A request that cannot become a job fails
// the whole call before anything is stored, and the error names its index.
func ExampleClient_EnqueueMany() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx := context.Background()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}

	msgs, err := client.EnqueueMany(ctx,
		conveyor.Request{Kind: "email.receipt", Args: Receipt{OrderID: "125"}},
		conveyor.Request{Kind: "invoice.render", Args: Receipt{OrderID: "125"}, Opts: &conveyor.EnqueueOptions{Queue: "reports"}},
	)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Println(m.Kind, "in", m.Queue)
	}

	_, err = client.EnqueueMany(ctx,
		conveyor.Request{Kind: "email.receipt", Args: Receipt{OrderID: "126"}},
		conveyor.Request{Kind: "email.receipt", Opts: &conveyor.EnqueueOptions{Delay: -time.Second}},
	)
	var reqErr *conveyor.RequestError
	if errors.As(err, &reqErr) {
		fmt.Println("refused: request", reqErr.Index)
	}
	// Output:
	// email.receipt in default
	// invoice.render in reports
	// refused: request 1
}

// Paid in time: cancel the payment timeout by its business key. Of a cancel
// and the timer's firing exactly one wins, so Cancel says which.
func ExampleClient_Cancel() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx := context.Background()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Enqueue(ctx, "order.timeout", Receipt{OrderID: "127"},
		&conveyor.EnqueueOptions{ID: "order:127:timeout", Delay: 30 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}

	cancelled, err := client.Cancel(ctx, "", "order:127:timeout")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled before it fired:", cancelled)

	cancelled, err = client.Cancel(ctx, "", "order:127:timeout")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled again:", cancelled)
	// Output:
	// cancelled before it fired: true
	// cancelled again: false
}

// Move a pending timer: here a reminder due in an hour is made due at once.
func ExampleClient_Reschedule() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	reminded := make(chan string, 1)
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.reminder", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		reminded <- r.OrderID
		return nil
	})
	pool, err := worker.NewPool(d, mux, nil) // its promoter makes timers ready when due
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Enqueue(ctx, "email.reminder", Receipt{OrderID: "128"},
		&conveyor.EnqueueOptions{ID: "order:128:reminder", Delay: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	moved, err := client.Reschedule(ctx, "", "order:128:reminder", time.Now().Add(20*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rescheduled:", moved)

	select {
	case id := <-reminded:
		fmt.Println("reminder sent for order", id)
	case <-time.After(5 * time.Second):
		log.Fatal("no reminder sent within 5s")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// rescheduled: true
	// reminder sent for order 128
}

// A failure that retrying cannot fix: the job is discarded on its first
// attempt, whatever the retry rules allow.
func ExampleSkipRetry() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		if r.Email == "" {
			return conveyor.SkipRetry(errors.New("receipt without an e-mail address"))
		}
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
	if _, err := client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "129"}, nil); err != nil {
		log.Fatal(err)
	}

	select {
	case s := <-discarded:
		fmt.Println(s)
	case <-time.After(5 * time.Second):
		log.Fatal("nothing discarded within 5s")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// email.receipt discarded after attempt 1: receipt without an e-mail address
}

// A downstream service said when to come back: the retry waits that long
// instead of the backoff policy's delay. Attempt numbers the runs from 1;
// Retries counts the failed ones.
func ExampleRetryAfter() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	runs := make(chan string, 2)
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		if job.Attempt() == 1 {
			runs <- fmt.Sprintf("attempt %d, %d retries: rate limited", job.Attempt(), job.Retries)
			return conveyor.RetryAfter(20*time.Millisecond, errors.New("429 too many requests"))
		}
		runs <- fmt.Sprintf("attempt %d, %d retries: sent", job.Attempt(), job.Retries)
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{
		Retry: &retry.Rules{Policy: retry.Constant(time.Hour)}, // RetryAfter wins over it
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
	if _, err := client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "130", Email: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}

	for range 2 {
		select {
		case s := <-runs:
			fmt.Println(s)
		case <-time.After(5 * time.Second):
			log.Fatal("no run within 5s")
		}
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1, 0 retries: rate limited
	// attempt 2, 1 retries: sent
}

// Middleware wraps the handler of every job a pool runs, as net/http
// middleware wraps handlers: here it reports each run's outcome, as logging
// or metrics middleware would.
func ExampleMiddleware() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan string, 1)
	var report conveyor.Middleware = func(next conveyor.Handler) conveyor.Handler {
		return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
			err := next.ProcessJob(ctx, job)
			ran <- fmt.Sprintf("%s, attempt %d: %v", job.Kind, job.Attempt(), err)
			return err
		})
	}
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Middleware: []conveyor.Middleware{report}})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "131", Email: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}

	select {
	case s := <-ran:
		fmt.Println(s)
	case <-time.After(5 * time.Second):
		log.Fatal("no run within 5s")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// email.receipt, attempt 1: <nil>
}

// A queue's figures, read in one round trip, and its pending timers,
// earliest due first.
func ExampleInspector_Queue() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx := context.Background()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.EnqueueMany(ctx,
		conveyor.Request{Kind: "email.receipt", Args: Receipt{OrderID: "132"}},
		conveyor.Request{Kind: "email.receipt", Args: Receipt{OrderID: "133"}},
		conveyor.Request{Kind: "order.timeout", Args: Receipt{OrderID: "134"},
			Opts: &conveyor.EnqueueOptions{ID: "order:134:timeout", Delay: 30 * time.Minute}},
		conveyor.Request{Kind: "order.timeout", Args: Receipt{OrderID: "133"},
			Opts: &conveyor.EnqueueOptions{ID: "order:133:timeout", Delay: 20 * time.Minute}},
	)
	if err != nil {
		log.Fatal(err)
	}

	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	q, err := insp.Queue(ctx, "default")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ready=%d in_flight=%d delayed=%d discarded=%d\n", q.Ready, q.InFlight, q.Delayed, q.Discarded)

	page, err := insp.Jobs(ctx, "default", conveyor.JobDelayed, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range page.Jobs {
		fmt.Println("timer", j.ID, "due in", time.Until(j.RunAt).Round(time.Minute))
	}
	// Output:
	// ready=2 in_flight=0 delayed=2 discarded=0
	// timer order:133:timeout due in 20m0s
	// timer order:134:timeout due in 30m0s
}
