package delay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/exampleredis"
	"github.com/conveyorq/conveyor/worker"
)

// Payment timeouts keyed by the order. The customer of order 1 pays in
// time and cancels the timer; order 2's timer fires. Of a cancel and the
// timer's firing exactly one wins, so a cancel that comes too late says so.
func Example() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	type Order struct {
		ID string `json:"id"`
	}

	// The shop: a timer per order, cancelled when the customer pays.
	client, err := conveyor.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"1", "2"} {
		_, err := client.Enqueue(ctx, "order.timeout", Order{ID: id},
			&conveyor.EnqueueOptions{ID: "order:" + id + ":timeout", Delay: 50 * time.Millisecond}) // 30 minutes, in a shop
		if err != nil {
			log.Fatal(err)
		}
	}
	paid, err := client.Cancel(ctx, "", "order:1:timeout")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 1 paid in time:", paid)

	// The workers: the pool runs the queue's promoter, which makes each
	// timer ready when due, and the handler of the timers that fire.
	timedOut := make(chan string, 2)
	mux := worker.NewMux()
	worker.HandleJSON(mux, "order.timeout", func(ctx context.Context, job *conveyor.Job, o Order) error {
		timedOut <- o.ID // release the stock, close the order
		return nil
	})
	pool, err := worker.NewPool(d, mux, nil)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()

	select {
	case id := <-timedOut:
		fmt.Printf("order %s timed out\n", id)
	case <-time.After(5 * time.Second):
		log.Fatal("no timer fired within 5s")
	}
	paid, err = client.Cancel(ctx, "", "order:2:timeout")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 2 paid in time:", paid)

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// order 1 paid in time: true
	// order 2 timed out
	// order 2 paid in time: false
}

// A periodic job: each fire is enqueued once, however many instances run
// the same entries. A worker pool runs the fires like any other job.
func ExampleCron() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	cron, err := delay.NewCron(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = cron.Add(delay.CronEntry{Name: "heartbeat", Spec: "@every 1s", Kind: "heartbeat.send"}) // "0 30 2 * * *": 02:30:00 daily
	if err != nil {
		log.Fatal(err)
	}

	fired := make(chan string, 1)
	mux := worker.NewMux()
	mux.HandleFunc("heartbeat.send", func(ctx context.Context, job *conveyor.Job) error {
		at, err := time.Parse(time.RFC3339, job.Headers[delay.HeaderCronFire])
		if err != nil {
			return err
		}
		select {
		case fired <- fmt.Sprintf("%s fired by %s, job ID FireID(name, fire time): %v",
			job.Kind, job.Headers[delay.HeaderCronName], job.ID == delay.FireID("heartbeat", at)):
		default: // a later fire, after the example has seen one
		}
		return nil
	})
	pool, err := worker.NewPool(d, mux, nil)
	if err != nil {
		log.Fatal(err)
	}
	poolDone, cronDone := make(chan error, 1), make(chan error, 1)
	go func() { poolDone <- pool.Run(ctx) }()
	go func() { cronDone <- cron.Run(ctx) }()

	select {
	case s := <-fired:
		fmt.Println(s)
	case <-time.After(5 * time.Second):
		log.Fatal("no fire within 5s")
	}
	stop()
	for _, done := range []chan error{cronDone, poolDone} {
		if err := <-done; err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// heartbeat.send fired by heartbeat, job ID FireID(name, fire time): true
}

// Add checks an entry and refuses what it cannot run; it stores nothing in
// Redis.
func ExampleCron_Add() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	cron, err := delay.NewCron(d, &delay.CronConfig{Queue: "reports"})
	if err != nil {
		log.Fatal(err)
	}
	entries := []delay.CronEntry{
		{Name: "nightly-report", Spec: "CRON_TZ=Europe/Paris 0 30 2 * * *", Kind: "report.render"},
		{Name: "weekly-digest", Spec: "@weekly", Kind: "digest.send", Queue: "emails"},
		{Name: "typo", Spec: "0 61 * * *", Kind: "report.render"},
		{Name: "nightly-report", Spec: "@daily", Kind: "report.render"},
	}
	for _, e := range entries {
		err := cron.Add(e)
		switch {
		case errors.Is(err, delay.ErrInvalidSpec):
			fmt.Printf("%s: invalid spec %q\n", e.Name, e.Spec)
		case errors.Is(err, delay.ErrEntryExists):
			fmt.Printf("%s: already added\n", e.Name)
		case err != nil:
			log.Fatal(err)
		}
	}
	for _, e := range cron.Entries() {
		fmt.Printf("%s: %s on queue %s\n", e.Name, e.Kind, e.Queue)
	}
	// Output:
	// typo: invalid spec "0 61 * * *"
	// nightly-report: already added
	// nightly-report: report.render on queue reports
	// weekly-digest: digest.send on queue emails
}

// A fire waits as a timer, under its fire ID, from Lookahead (1s) before
// its time: conveyor.Client.Cancel and Reschedule find it by that ID.
func ExampleFireID() {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		log.Fatal(err)
	}
	at := time.Date(2026, time.January, 1, 2, 30, 0, 0, paris)
	id := delay.FireID("nightly-report", at)
	fmt.Println(id)

	// To skip that night's report while it waits:
	// client.Cancel(ctx, "reports", id)

	// Output:
	// nightly-report@1767231000000
}

// A promoter apart from the pools, in a small scheduler process: the pools
// run none (worker.Config.NoPromoter), and this one makes the queue's
// timers ready when due. Any number may run: each timer is promoted once.
func ExampleNewPromoter() {
	rdb, prefix, cleanup := exampleredis.Open() // in a program: redis.NewClient(...) and your app's name
	defer cleanup()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	promoter, err := delay.NewPromoter(d, "emails", nil)
	if err != nil {
		log.Fatal(err)
	}
	promoterDone := make(chan error, 1)
	go func() { promoterDone <- promoter.Run(ctx) }()

	sent := make(chan string, 1)
	mux := worker.NewMux()
	mux.HandleFunc("email.reminder", func(ctx context.Context, job *conveyor.Job) error {
		sent <- job.ID
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Queue: "emails", NoPromoter: true})
	if err != nil {
		log.Fatal(err)
	}
	poolDone := make(chan error, 1)
	go func() { poolDone <- pool.Run(ctx) }()

	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "emails"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Enqueue(ctx, "email.reminder", nil, &conveyor.EnqueueOptions{ID: "cart:42:reminder", Delay: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}

	select {
	case id := <-sent:
		fmt.Println("sent", id)
	case <-time.After(5 * time.Second):
		log.Fatal("no reminder within 5s")
	}
	stop()
	for _, done := range []chan error{poolDone, promoterDone} {
		if err := <-done; err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("promoted:", promoter.Stats().Promoted)
	// Output:
	// sent cart:42:reminder
	// promoted: 1
}
