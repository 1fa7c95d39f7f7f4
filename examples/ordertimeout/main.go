// Command ordertimeout is a first, small version of Conveyor's order-timeout
// demo: every order gets a payment timer keyed by its order ID; whichever of
// "payment" and "timeout" moves the order out of "unpaid" first wins, and the
// other finds nothing to do. A timed-out order is cancelled and its stock
// returned.
//
//	go run ./examples/ordertimeout
//
// It uses REDIS_URL, else a Redis on 127.0.0.1:6379, else an embedded
// in-memory Redis (with a loud warning). It runs for a few seconds and exits.
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/examples/internal/devredis"
	"github.com/conveyorq/conveyor/worker"
)

//go:embed lua/transition.lua
var transitionLua string

var transition = redis.NewScript(transitionLua)

func main() {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb, cleanup, err := devredis.Connect(ctx, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		os.Exit(1)
	}
	err = run(ctx, rdb, logger, os.Stdout, 1500*time.Millisecond)
	cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		os.Exit(1)
	}
}

// shop holds the demo's orders and stock, under a namespace of its own so the
// demo can run against a Redis that holds other data.
type shop struct {
	rdb redis.UniversalClient
	ns  string
}

func (s shop) orderKey(id string) string { return s.ns + ":order:" + id }
func (s shop) stockKey() string          { return s.ns + ":stock" }

// move tries one state transition and reports whether it won.
func (s shop) move(ctx context.Context, id, from, to string) (bool, error) {
	n, err := transition.Run(ctx, s.rdb, []string{s.orderKey(id), s.stockKey()}, from, to).Int()
	return n == 1, err
}

type timeoutArgs struct {
	OrderID string `json:"order_id"`
}

// run plays the demo: two orders, one paid before its timer fires, one not.
func run(ctx context.Context, rdb redis.UniversalClient, logger *slog.Logger, w io.Writer, paymentWindow time.Duration) error {
	out := &syncWriter{w: w} // handlers print from their own goroutines
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	s := shop{rdb: rdb, ns: "ordertimeout-demo:" + runID}
	prefix := "ordertimeout-demo-" + runID
	defer s.cleanupKeys(context.WithoutCancel(ctx), prefix)

	d, err := list.New(rdb, &list.Config{Prefix: prefix, Logger: logger})
	if err != nil {
		return err
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "orders"})
	if err != nil {
		return err
	}

	if err := rdb.HSet(ctx, s.stockKey(), "tea", 10).Err(); err != nil {
		return err
	}
	orders := []string{"1001", "1002"}
	for _, id := range orders {
		if err := rdb.HSet(ctx, s.orderKey(id), "state", "unpaid", "item", "tea").Err(); err != nil {
			return err
		}
		if err := rdb.HIncrBy(ctx, s.stockKey(), "tea", -1).Err(); err != nil {
			return err
		}
		_, err := client.Enqueue(ctx, "order.timeout", timeoutArgs{OrderID: id}, &conveyor.EnqueueOptions{
			ID: "order:" + id + ":timeout", Delay: paymentWindow,
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "order %s created (unpaid); payment timer fires in %v\n", id, paymentWindow)
	}

	settled := make(chan string, len(orders))
	mux := worker.NewMux()
	worker.Handle(mux, "order.timeout", func(ctx context.Context, job *conveyor.Job, a timeoutArgs) error {
		won, err := s.move(ctx, a.OrderID, "unpaid", "cancelled")
		if err != nil {
			return err // retried with backoff
		}
		if won {
			fmt.Fprintf(out, "order %s: timeout won, order cancelled and stock returned\n", a.OrderID)
		} else {
			fmt.Fprintf(out, "order %s: timer fired but the order was already paid; nothing to do\n", a.OrderID)
		}
		settled <- a.OrderID
		return nil
	})
	pool, err := worker.NewPool(d, mux, &worker.Config{Queue: "orders", Concurrency: 4, Logger: logger})
	if err != nil {
		return err
	}
	poolCtx, stop := context.WithCancel(ctx)
	defer stop()
	poolErr := make(chan error, 1)
	go func() { poolErr <- pool.Run(poolCtx) }()

	// Order 1001 is paid right away: the payment wins its race.
	won, err := s.move(ctx, "1001", "unpaid", "paid")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "order 1001: payment arrived; payment won the race: %v\n", won)
	// Its timer is no longer needed. Cancel reports whether it was still
	// pending; if it was not, the timer already fired and its handler finds
	// the order paid, so either way the order stays paid.
	cancelled, err := client.Cancel(ctx, "", "order:1001:timeout")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "order 1001: payment timer cancelled before it fired: %v\n", cancelled)
	pending := 1
	if !cancelled {
		pending++
	}
	fmt.Fprintln(out, "order 1002: no payment; waiting for its timer...")

	deadline := time.After(paymentWindow + 15*time.Second)
	for range pending {
		select {
		case <-settled:
		case err := <-poolErr:
			return fmt.Errorf("pool stopped early: %w", err)
		case <-deadline:
			return errors.New("timers did not fire in time")
		}
	}
	stop()
	if err := <-poolErr; err != nil {
		return err
	}
	for _, id := range orders {
		state, err := rdb.HGet(ctx, s.orderKey(id), "state").Result()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "final: order %s is %s\n", id, state)
	}
	stock, err := rdb.HGet(ctx, s.stockKey(), "tea").Result()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "final: tea in stock: %s (10, minus the paid order)\n", stock)
	return nil
}

// cleanupKeys removes what the demo wrote, so running it against a real Redis
// leaves nothing behind.
func (s shop) cleanupKeys(ctx context.Context, prefix string) {
	for _, pattern := range []string{s.ns + ":*", prefix + ":*"} {
		iter := s.rdb.Scan(ctx, 0, pattern, 100).Iterator()
		for iter.Next(ctx) {
			s.rdb.Del(ctx, iter.Val())
		}
	}
}

// syncWriter serialises writes from several goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
