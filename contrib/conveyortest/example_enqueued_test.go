package conveyortest_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
)

// Order is the payload of the examples' jobs.
type Order struct {
	ID string `json:"id"`
}

// placeOrder is code under test: it enqueues a receipt now and a payment
// timeout in 30 minutes.
func placeOrder(ctx context.Context, c *conveyor.Client, id string) error {
	if _, err := c.Enqueue(ctx, "email.receipt", Order{ID: id}, nil); err != nil {
		return err
	}
	_, err := c.Enqueue(ctx, "order.timeout", Order{ID: id},
		&conveyor.EnqueueOptions{Delay: 30 * time.Minute, ID: "order:" + id + ":timeout"})
	return err
}

// Assert what a code path enqueued: kinds, decoded payloads, IDs, delays.
func ExampleEnqueued() {
	ctx := context.Background()
	d, err := conveyortest.New(&conveyortest.Config{Clock: conveyortest.NewClock(time.Time{})})
	if err != nil {
		log.Fatal(err)
	}
	client, err := conveyortest.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := placeOrder(ctx, client, "123"); err != nil {
		log.Fatal(err)
	}
	t := exampleT{} // in a test: its *testing.T
	timeout := conveyortest.RequireEnqueued[Order](t, d, "default", "order.timeout")
	fmt.Println("timer", timeout.ID)
	for _, job := range conveyortest.Enqueued[Order](t, d, "default") {
		fmt.Printf("%s order %s delayed=%v run at %s\n", job.Kind, job.Args.ID, job.Delayed, job.RunAt.Format(time.Kitchen))
	}
	// Output:
	// timer order:123:timeout
	// email.receipt order 123 delayed=false run at 12:00AM
	// order.timeout order 123 delayed=true run at 12:30AM
}

// exampleT stands for the *testing.T a real test passes: it stops the
// example where a test would fail.
type exampleT struct{ testing.TB }

func (exampleT) Helper() {}

func (exampleT) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }
