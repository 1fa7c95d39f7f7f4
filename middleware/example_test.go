package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/middleware"
)

// A chain of Recover and Timeout outside any pool: the panic comes back as
// a *PanicError, and a handler that overran its kind's deadline is reported
// with context.DeadlineExceeded.
func Example() {
	timeout, err := middleware.Timeout(&middleware.TimeoutConfig{
		Kinds: map[string]time.Duration{"slow": time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	chain := conveyor.Chain(middleware.Recover(), timeout)
	h := chain(conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		if job.Kind == "bad" {
			panic("nil map")
		}
		<-ctx.Done() // ignores the deadline's error, returns nil
		return nil
	}))
	job := func(kind string) *conveyor.Job {
		return conveyor.NewJob(&broker.Delivery{Message: broker.Message{ID: "1", Kind: kind}}, nil)
	}

	var pe *middleware.PanicError
	err = h.ProcessJob(context.Background(), job("bad"))
	fmt.Println(errors.As(err, &pe), pe.Value)
	err = h.ProcessJob(context.Background(), job("slow"))
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// true nil map
	// true
}
