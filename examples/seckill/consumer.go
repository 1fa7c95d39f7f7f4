package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/middleware"
	"github.com/conveyorq/conveyor/worker"
)

// consume runs the order consumer, a worker pool on the sale's queue, until
// ctx ends. Any number of them may run, in any number of processes.
//
// Its chain, outermost first:
//   - Recover and Logging;
//   - a RateLimit on order writes (WritesPerSecond across every consumer):
//     the queue takes the rush at Redis speed and the database sees a
//     steady trickle; an order over the budget is postponed, never refused,
//     as the buyer has it already;
//   - Idempotency keyed by the order ID: a job delivered again after its
//     run finished (its worker died before the ack) is acked without
//     running.
//
// Idempotency has a gap (a worker that dies between its write and marking
// the key done), which the database closes: the order's row has a UNIQUE
// order ID and the insert does nothing when the row is there.
func (a *app) consume(ctx context.Context) error {
	writes, err := middleware.RateLimit(a.rdb, &middleware.RateLimitConfig{
		Limit: a.cfg.WritesPerSecond, Period: time.Second, Name: "db-writes", Prefix: a.cfg.Prefix,
		Key: func(job *conveyor.Job) string {
			if job.Kind == kindCreate {
				return "orders"
			}
			return "" // timers are not limited
		},
		OnDecision: func(_ *conveyor.Job, d middleware.RateDecision) {
			if !d.Allowed {
				a.postponed.Add(1)
			}
		},
	})
	if err != nil {
		return err
	}
	once, err := middleware.Idempotency(a.rdb, &middleware.IdempotencyConfig{
		Prefix: a.cfg.Prefix, Lease: a.cfg.IdempotencyLease,
		Key: func(job *conveyor.Job) string {
			if job.Kind == kindCreate {
				return kindCreate + ":" + job.ID // the job ID is the order ID
			}
			return "" // a timer's handler is a compare-and-set: safe to run twice
		},
	})
	if err != nil {
		return err
	}
	mux := worker.NewMux()
	worker.HandleJSON(mux, kindCreate, a.create)
	worker.HandleJSON(mux, kindTimeout, a.timeout)
	pool, err := worker.NewPool(a.d, mux, &worker.Config{
		Queue: queue, Concurrency: a.cfg.Workers, VisibilityTimeout: a.cfg.VisibilityTimeout, Logger: a.cfg.Logger,
		Middleware: []conveyor.Middleware{middleware.Recover(), middleware.Logging(a.cfg.Logger, nil), writes, once},
	})
	if err != nil {
		return err
	}
	return pool.Run(ctx)
}

// create writes an order into the database and starts its payment timer.
func (a *app) create(ctx context.Context, _ *conveyor.Job, o orderArgs) error {
	inserted, held, err := a.store.insert(ctx, o)
	if err != nil {
		return err // retried with backoff
	}
	switch {
	case inserted:
		a.count(ctx, o.Sale, "written")
	case held == o.Order:
		// The row is there: this job ran before and its worker died
		// before the idempotency key was marked done.
		a.count(ctx, o.Sale, "replayed")
	default:
		// The user holds another order. The gate refuses that, so this job
		// did not come through it; the database refuses it all the same.
		// Its unit (if it took one) goes back.
		if _, err := a.shop.settle(ctx, o.Sale, o.Order, stateCancelled); err != nil {
			return err
		}
		a.count(ctx, o.Sale, "db_rejected")
		return conveyor.SkipRetry(fmt.Errorf("order %s refused by the database: user %s holds order %s", o.Order, o.User, held))
	}
	if a.cfg.afterWrite != nil {
		a.cfg.afterWrite(ctx, o.Order)
	}
	// The payment window starts once the order is written, when the buyer
	// can see it. Only an unpaid order needs a timer: a replay may find the
	// order paid or timed out already (its first run got that far before
	// its worker died), and a timer scheduled then would be a spare one,
	// pending for a window to do nothing. A payment landing between this
	// read and the Enqueue still leaves a spare timer, which finds the order
	// paid and does nothing. Scheduled again by a replay while the first one
	// is pending, the timer is refused as a duplicate.
	st, err := a.shop.state(ctx, o.Order)
	if err != nil {
		return err
	}
	if st == stateUnpaid {
		_, err = a.client.Enqueue(ctx, kindTimeout, timeoutArgs{Order: o.Order, Sale: o.Sale},
			&conveyor.EnqueueOptions{Queue: queue, ID: timerID(o.Order), Delay: a.cfg.PaymentWindow})
		if err != nil && !errors.Is(err, conveyor.ErrDuplicate) {
			return err
		}
	}
	return a.shop.markDone(ctx, o.Sale, o.Order)
}

// timeout cancels an order that is still unpaid when its timer fires,
// giving its unit back; a paid order is left alone.
func (a *app) timeout(ctx context.Context, _ *conveyor.Job, t timeoutArgs) error {
	won, err := a.shop.settle(ctx, t.Sale, t.Order, stateCancelled)
	if err != nil {
		return err
	}
	if won {
		a.count(ctx, t.Sale, "timed_out")
	}
	// Also when it lost: a run that died between the two writes left the
	// row behind.
	return syncStatus(ctx, a.shop, a.store, t.Order)
}

// count bumps one of the sale's counters. They are figures for the report,
// so a failure is logged rather than failing (and repeating) the job.
func (a *app) count(ctx context.Context, sale, field string) {
	if err := a.shop.count(ctx, sale, field, 1); err != nil {
		a.cfg.Logger.WarnContext(ctx, "seckill: counter not updated", "field", field, "err", err)
	}
}
