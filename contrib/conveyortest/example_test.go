package conveyortest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

// Run a job through the application's mux and middleware, inline, and see
// how it was settled.
func ExampleRunner_Process() {
	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, o Order) error {
		if o.ID == "" {
			return conveyor.SkipRetry(errors.New("no order ID"))
		}
		return nil
	})
	d, err := conveyortest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	runner, err := conveyortest.NewRunner(d, mux, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range []Order{{ID: "123"}, {}} {
		res, err := runner.Process(context.Background(), "email.receipt", o, nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %q\n", res.Settlement.Outcome, res.Settlement.Reason)
	}
	// Output:
	// acked ""
	// discarded "no order ID"
}

// Retries and timers come due when the test moves the fake clock: no
// sleeping.
func ExampleClock_Advance() {
	ctx := context.Background()
	clock := conveyortest.NewClock(time.Time{})
	d, err := conveyortest.New(&conveyortest.Config{Clock: clock})
	if err != nil {
		log.Fatal(err)
	}
	client, err := conveyortest.NewClient(d, nil)
	if err != nil {
		log.Fatal(err)
	}
	calls := 0
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		calls++
		if calls == 1 {
			return errors.New("gateway timeout")
		}
		return nil
	})
	runner, err := conveyortest.NewRunner(d, h, &conveyortest.RunnerConfig{
		Retry: &retry.Rules{Policy: retry.Constant(time.Minute)},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Enqueue(ctx, "charge", nil, nil); err != nil {
		log.Fatal(err)
	}
	drain := func() {
		results, err := runner.Drain(ctx, "default")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d run", clock.Now().Format(time.TimeOnly), len(results))
		for _, r := range results {
			fmt.Printf(", %s", r.Settlement.Outcome)
			if !r.Settlement.At.IsZero() {
				fmt.Printf(" until %s", r.Settlement.At.Format(time.TimeOnly))
			}
		}
		fmt.Println()
	}
	drain()
	clock.Advance(59 * time.Second)
	drain()
	clock.Advance(time.Second)
	drain()
	// Output:
	// 00:00:00: 1 run, retried until 00:01:00
	// 00:00:59: 0 run
	// 00:01:00: 1 run, acked
}
