// Command ordertimeout is Conveyor's order-timeout demo (seeds 004 and 000).
// Every order gets a payment timer keyed by its order ID; paying cancels the
// timer; a timer that fires cancels the order and gives its stock back. The
// payment and the timer race to move the order out of "unpaid", and an
// atomic compare-and-set (lua/transition.lua) gives each race one winner.
//
//	go run ./examples/ordertimeout
//
// Four orders tell the story: 1001 is paid at once (the payment wins); 1002
// is never paid (the timeout wins), and the stock service times out once,
// so its timeout job is retried; 1003 is paid after its timer fired (the
// timeout wins and the payment is refused); 1004's stock service is down
// until the job runs out of attempts and lands in the discard queue, which
// the demo reads through conveyor.Inspector and re-drives once the service
// is repaired. Then twenty orders are paid within a few milliseconds of
// their deadline, a photo finish, and the demo checks that each has exactly
// one winner and that the stock adds up. It exits 1 if anything does not.
//
// It uses REDIS_URL, else a Redis on 127.0.0.1:6379, else an embedded
// in-memory Redis (with a loud warning); it deletes its keys before it exits,
// unless ORDERTIMEOUT_KEEP=1: then it keeps them under the prefix
// ordertimeout-demo (deleting the previous run's first), for
// `go run ./cmd/conveyor dash --no-auth --prefix ordertimeout-demo` to show.
package main

import (
	"context"
	"encoding/json"
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
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

const (
	queue       = "orders"
	kindTimeout = "order.timeout"
	item        = "tea"
	shelf       = 100 // units of tea at the start
)

// timerID is the business key of an order's payment timer: Cancel finds
// the timer by it, with no ID of Conveyor's to store.
func timerID(order string) string { return "order:" + order + ":timeout" }

// timeoutArgs is the payload of an order's payment timer.
type timeoutArgs struct {
	OrderID string `json:"order_id"`
}

// config sets the demo's pace. Production would use a payment window of
// 30 minutes and a retry policy of minutes; the demo uses seconds.
type config struct {
	// Window is how long an order waits for its payment. Defaults to 1.5s.
	Window time.Duration
	// RetryDelay is the wait before a failed timeout job runs again.
	// Defaults to 200ms.
	RetryDelay time.Duration
	// MaxAttempts caps the attempts of a timeout job; a failure of the last one
	// discards it. Defaults to 3.
	MaxAttempts int
	// RaceOrders is how many orders take part in the photo finish.
	// Defaults to 20.
	RaceOrders int
	// Prefix starts every key the demo writes. Defaults to a new one per run.
	Prefix string
	// Keep leaves the demo's keys in Redis when it ends, for the
	// dashboard or the CLI to show; the previous run's under Prefix are
	// deleted when it starts.
	Keep bool
}

// keepEnv, set to 1, keeps the demo's keys under keptPrefix.
const keepEnv, keptPrefix = "ORDERTIMEOUT_KEEP", "ordertimeout-demo"

func (c config) withDefaults() config {
	if c.Window == 0 {
		c.Window = 1500 * time.Millisecond
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 200 * time.Millisecond
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.RaceOrders == 0 {
		c.RaceOrders = 20
	}
	if c.Prefix == "" {
		c.Prefix = "ordertimeout-demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return c
}

func main() {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb, cleanup, err := devredis.Connect(ctx, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		os.Exit(1)
	}
	cfg := config{}
	if os.Getenv(keepEnv) == "1" {
		cfg.Prefix, cfg.Keep = keptPrefix, true
	}
	err = run(ctx, rdb, logger, os.Stdout, cfg)
	cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ordertimeout:", err)
		os.Exit(1)
	}
}

// demo is the running demo: the shop, the queue's client and inspector, and
// what the handlers tell the main goroutine.
type demo struct {
	cfg    config
	out    io.Writer
	shop   *shop
	stock  *stockService
	client *conveyor.Client
	insp   *conveyor.Inspector
	events *latches

	// story holds the orders whose every step is printed; the photo
	// finish's orders are only counted.
	story map[string]bool

	mu          sync.Mutex
	timeoutsWon map[string]bool // orders the timer cancelled
	paymentsWon map[string]bool // orders the payment moved to paid
	cancelled   map[string]bool // paid orders whose timer was cancelled before it fired
	beaten      map[string]bool // paid orders whose timer fired and found them paid
}

// run plays the demo on rdb and prints what happens to w.
func run(ctx context.Context, rdb redis.UniversalClient, logger *slog.Logger, w io.Writer, cfg config) error {
	cfg = cfg.withDefaults()
	s := newShop(rdb, cfg.Prefix)
	if cfg.Keep {
		cleanupKeys(ctx, rdb, cfg.Prefix)
		defer fmt.Fprintf(w, "\nIts keys stay in Redis under the prefix %s: go run ./cmd/conveyor dash --no-auth --prefix %s\n", cfg.Prefix, cfg.Prefix)
	} else {
		defer cleanupKeys(context.WithoutCancel(ctx), rdb, cfg.Prefix)
	}

	d, err := list.New(rdb, &list.Config{Prefix: cfg.Prefix, Logger: logger})
	if err != nil {
		return err
	}
	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: queue})
	if err != nil {
		return err
	}
	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		return err
	}
	a := &demo{
		cfg: cfg, out: &syncWriter{w: w}, shop: s, client: client, insp: insp, events: newLatches(),
		// The stock service times out once for order 1002, and order 1004's
		// warehouse is down until the demo repairs it.
		stock:       newStockService(s, map[string]int{"1002": 1, "1004": outageUntilRepaired}),
		story:       map[string]bool{"1001": true, "1002": true, "1003": true, "1004": true},
		timeoutsWon: map[string]bool{}, paymentsWon: map[string]bool{},
		cancelled: map[string]bool{}, beaten: map[string]bool{},
	}
	a.printf("ordertimeout: payment window %v; a failed timeout job runs again after %v, %d runs at most",
		cfg.Window, cfg.RetryDelay, cfg.MaxAttempts)

	// The worker side: one handler, a short retry policy, and a hook that
	// sees every job the pool discards.
	mux := worker.NewMux()
	worker.HandleJSON(mux, kindTimeout, a.onTimeout)
	pool, err := worker.NewPool(d, mux, &worker.Config{
		Queue:       queue,
		Concurrency: 8,
		Retry:       &retry.Rules{Policy: retry.Constant(cfg.RetryDelay), MaxAttempts: cfg.MaxAttempts},
		OnDiscard:   a.onDiscard,
		Logger:      logger,
	})
	if err != nil {
		return err
	}
	// Every wait below ends with an error when the pool stops early or the
	// demo takes far longer than it should.
	waitCtx, cancelWait := context.WithCancelCause(ctx)
	defer cancelWait(nil)
	waitCtx, cancelDeadline := context.WithTimeout(waitCtx, cfg.Window+time.Duration(cfg.MaxAttempts)*cfg.RetryDelay+30*time.Second)
	defer cancelDeadline()
	poolCtx, stopPool := context.WithCancel(ctx)
	defer stopPool()
	poolDone := make(chan error, 1)
	go func() {
		err := pool.Run(poolCtx)
		poolDone <- err
		cancelWait(fmt.Errorf("the pool stopped: %v", err))
	}()
	stopped := false
	defer func() {
		if !stopped {
			stopPool()
			<-poolDone
		}
	}()

	// The orders, each with its payment timer.
	if err := s.setStock(ctx, item, shelf); err != nil {
		return err
	}
	created := time.Now()
	var race []string
	for i := range cfg.RaceOrders {
		race = append(race, strconv.Itoa(2001+i))
	}
	for _, id := range append([]string{"1001", "1002", "1003", "1004"}, race...) {
		if err := a.createOrder(ctx, id); err != nil {
			return err
		}
	}
	a.printf("orders 2001-%d created too, for the photo finish", 2000+cfg.RaceOrders)

	// Order 1001: paid at once. The payment wins.
	if err := a.pay(ctx, "1001"); err != nil {
		return err
	}

	// The photo finish: each customer pays at a moment spread over a tenth
	// of the window either side of the deadline, so some payments come in
	// just before the timer fires and some just after.
	spread := cfg.Window / 10
	raceErrs := make(chan error, len(race))
	var customers sync.WaitGroup
	for i, id := range race {
		offset := -spread + time.Duration(i)*2*spread/time.Duration(max(len(race)-1, 1))
		customers.Go(func() {
			t := time.NewTimer(time.Until(created.Add(cfg.Window + offset)))
			defer t.Stop()
			select {
			case <-waitCtx.Done():
				raceErrs <- context.Cause(waitCtx)
				return
			case <-t.C:
			}
			raceErrs <- a.pay(ctx, id)
		})
	}
	defer func() {
		cancelWait(errors.New("the demo ended"))
		customers.Wait()
	}()

	// Order 1003: its payment comes after the timer fired. The timeout won.
	if err := a.events.wait(waitCtx, "1003 cancelled"); err != nil {
		return err
	}
	if err := a.pay(ctx, "1003"); err != nil {
		return err
	}

	// Order 1004: the stock service is down for it on every run, so the
	// pool discards its job. An operator finds it in the discard queue,
	// repairs the service and re-drives the job.
	if err := a.events.wait(waitCtx, "1004 discarded"); err != nil {
		return err
	}
	if err := a.showQueue(ctx); err != nil {
		return err
	}
	a.stock.Repair("1004")
	// Printed first: the re-driven job may run before Redrive returns.
	a.printf("order 1004: the stock service is repaired; re-driving %s with Inspector.Redrive", timerID("1004"))
	n, err := insp.Redrive(ctx, queue, conveyor.DiscardFilter{ID: timerID("1004")}, 0)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("Inspector.Redrive moved %d jobs, want 1", n)
	}

	for _, e := range []string{"1002 stock returned", "1003 stock returned", "1004 stock returned"} {
		if err := a.events.wait(waitCtx, e); err != nil {
			return err
		}
	}
	customers.Wait()
	close(raceErrs)
	for err := range raceErrs {
		if err != nil {
			return err
		}
	}
	// Timers a late payment could not cancel have fired: wait until their
	// jobs have run and nothing is left in the queue.
	if err := a.waitDrained(waitCtx); err != nil {
		return err
	}
	stopped = true
	stopPool()
	if err := <-poolDone; err != nil {
		return err
	}
	return a.check(ctx, race)
}

// createOrder records an unpaid order and starts its payment timer.
func (a *demo) createOrder(ctx context.Context, id string) error {
	if err := a.shop.createOrder(ctx, id, item); err != nil {
		return err
	}
	_, err := a.client.Enqueue(ctx, kindTimeout, timeoutArgs{OrderID: id}, &conveyor.EnqueueOptions{
		ID: timerID(id), Delay: a.cfg.Window,
	})
	if err != nil {
		return fmt.Errorf("order %s: payment timer: %w", id, err)
	}
	if a.story[id] {
		a.printf("order %s created (unpaid); payment timer %s fires in %v", id, timerID(id), a.cfg.Window)
	}
	return nil
}

// pay is the payment arriving: it moves the order to paid if the timer has
// not cancelled it, and then cancels the timer.
func (a *demo) pay(ctx context.Context, id string) error {
	won, state, err := a.shop.transition(ctx, id, unpaid, paid)
	if err != nil {
		return err
	}
	if !won {
		if a.story[id] {
			a.printf("order %s: payment arrived, but the timeout won the race: the order is %s; payment refused", id, state)
		}
		return nil
	}
	a.mu.Lock()
	a.paymentsWon[id] = true
	a.mu.Unlock()
	// Cancel reports whether the timer was still pending. If it was not, it
	// fired already, and its job will find the order paid: either way the
	// order stays paid.
	cancelledTimer, err := a.client.Cancel(ctx, "", timerID(id))
	if err != nil {
		return fmt.Errorf("order %s: cancel timer: %w", id, err)
	}
	a.mu.Lock()
	a.cancelled[id] = cancelledTimer
	a.mu.Unlock()
	if a.story[id] {
		a.printf("order %s: payment arrived: the payment won the race; timer cancelled before it fired: %v", id, cancelledTimer)
	}
	return nil
}

// onTimeout runs when an order's payment timer fires. It cancels the order
// if it is still unpaid, then gives its stock back. The two steps are apart
// (the stock goes back through a service that can fail) and each is safe to
// repeat, so a run that failed half-way is simply run again.
func (a *demo) onTimeout(ctx context.Context, job *conveyor.Job, t timeoutArgs) error {
	id, attempt := t.OrderID, job.Attempt()
	won, state, err := a.shop.transition(ctx, id, unpaid, cancelled)
	if err != nil {
		return err // retried by the pool's rules
	}
	switch {
	case won:
		a.mu.Lock()
		a.timeoutsWon[id] = true
		a.mu.Unlock()
		if a.story[id] {
			a.printf("order %s: payment timer fired: the timeout won the race; order cancelled", id)
		}
		a.events.fire(id + " cancelled")
	case state == paid:
		a.mu.Lock()
		a.beaten[id] = true
		a.mu.Unlock()
		if a.story[id] {
			a.printf("order %s: payment timer fired, but the order is paid; nothing to do", id)
		}
		return nil
	case state != cancelled:
		return conveyor.SkipRetry(fmt.Errorf("order %s is %q", id, state)) // no retry can help
	}
	// The order is cancelled, by this run or an earlier one: its stock must
	// go back.
	returned, err := a.stock.Return(ctx, id)
	if err != nil {
		if a.story[id] {
			next := fmt.Sprintf("retried in %v", a.cfg.RetryDelay)
			if attempt >= a.cfg.MaxAttempts {
				next = "no attempts left"
			}
			a.printf("order %s: attempt %d of %d failed: %v; %s", id, attempt, a.cfg.MaxAttempts, err, next)
		}
		return err
	}
	if a.story[id] {
		if returned {
			a.printf("order %s: stock returned (attempt %d of %d)", id, attempt, a.cfg.MaxAttempts)
		} else {
			a.printf("order %s: stock was already returned (attempt %d of %d)", id, attempt, a.cfg.MaxAttempts)
		}
	}
	a.events.fire(id + " stock returned")
	return nil
}

// onDiscard is the pool's OnDiscard hook: the job is in the discard queue.
func (a *demo) onDiscard(_ context.Context, job *conveyor.Job, reason string) {
	var t timeoutArgs
	if err := decodeArgs(job, &t); err != nil {
		a.printf("job %s discarded: %s", job.ID, reason)
		return
	}
	a.printf("order %s: job %s discarded after attempt %d: %s", t.OrderID, job.ID, job.Attempt(), reason)
	a.events.fire(t.OrderID + " discarded")
}

func (a *demo) printf(format string, args ...any) {
	fmt.Fprintf(a.out, format+"\n", args...)
}

// decodeArgs reads a job's JSON payload.
func decodeArgs(job *conveyor.Job, v any) error {
	return json.Unmarshal(job.Payload, v)
}

// cleanupKeys removes what the demo wrote, so that running it against a
// real Redis leaves nothing behind.
func cleanupKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}
