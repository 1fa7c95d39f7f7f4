package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor"
)

// showQueue prints the queue's discard queue and figures as an operator
// would read them, through conveyor.Inspector.
func (a *demo) showQueue(ctx context.Context) error {
	page, err := a.insp.Jobs(ctx, queue, conveyor.JobDiscarded, nil)
	if err != nil {
		return err
	}
	a.printf("discard queue of %q (conveyor.Inspector): %d job(s)", queue, page.Total)
	for _, j := range page.Jobs {
		a.printf("  %s  kind=%s  attempt=%d  reason=%q", j.ID, j.Kind, j.Attempt(), j.Reason)
	}
	q, err := a.insp.Queue(ctx, queue)
	if err != nil {
		return err
	}
	a.printf("queue %q: ready=%d in_flight=%d delayed=%d discarded=%d; processed=%d failed=%d",
		queue, q.Ready, q.InFlight, q.Delayed, q.Discarded, q.Processed, q.Failed)
	return nil
}

// waitDrained waits until the queue holds no job ready, running or waiting.
func (a *demo) waitDrained(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		q, err := a.insp.Queue(ctx, queue)
		if err != nil {
			return err
		}
		if q.Ready+q.InFlight+q.Delayed == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("queue not drained (ready=%d in_flight=%d delayed=%d): %w",
				q.Ready, q.InFlight, q.Delayed, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// check prints the end state and verifies it: every order has exactly one
// winner, every cancelled order gave its unit back once, the shelf holds
// what was not paid for, and the discard queue is empty again.
func (a *demo) check(ctx context.Context, race []string) error {
	var problems []error
	paidTotal := 0
	for _, id := range append([]string{"1001", "1002", "1003", "1004"}, race...) {
		o, err := a.shop.order(ctx, id)
		if err != nil {
			return err
		}
		a.mu.Lock()
		byPayment, byTimeout := a.paymentsWon[id], a.timeoutsWon[id]
		a.mu.Unlock()
		switch {
		case byPayment == byTimeout:
			problems = append(problems, fmt.Errorf("order %s: payment won %v, timeout won %v", id, byPayment, byTimeout))
		case o["state"] == paid && byPayment && o["stock_returned"] == "":
			paidTotal++
		case o["state"] == cancelled && byTimeout && o["stock_returned"] == "1":
		default:
			problems = append(problems, fmt.Errorf("order %s ends as %v", id, o))
		}
		if a.story[id] {
			a.printf("final: order %s is %s", id, o["state"])
		}
	}
	var racePaid, raceCancelled, raceBeaten int
	a.mu.Lock()
	for _, id := range race {
		if a.paymentsWon[id] {
			racePaid++
		}
		if a.cancelled[id] {
			raceCancelled++
		}
		if a.beaten[id] {
			raceBeaten++
		}
	}
	a.mu.Unlock()
	a.printf("photo finish: %d orders paid within %v either side of their deadline: the payment won %d (%d timers cancelled in time, %d fired and found the order paid), the timeout won %d",
		len(race), a.cfg.Window/10, racePaid, raceCancelled, raceBeaten, len(race)-racePaid)
	if raceCancelled+raceBeaten != racePaid {
		problems = append(problems, fmt.Errorf("photo finish: %d payments won, but %d timers cancelled and %d found the order paid",
			racePaid, raceCancelled, raceBeaten))
	}

	left, err := a.shop.stockOf(ctx, item)
	if err != nil {
		return err
	}
	a.printf("final: %s on the shelf: %d (%d, less %d paid orders)", item, left, shelf, paidTotal)
	if left != shelf-paidTotal {
		problems = append(problems, fmt.Errorf("%d units on the shelf, want %d", left, shelf-paidTotal))
	}
	q, err := a.insp.Queue(ctx, queue)
	if err != nil {
		return err
	}
	a.printf("final: queue %q: ready=%d in_flight=%d delayed=%d discarded=%d; processed=%d failed=%d",
		queue, q.Ready, q.InFlight, q.Delayed, q.Discarded, q.Processed, q.Failed)
	if q.Discarded != 0 {
		problems = append(problems, fmt.Errorf("%d jobs left in the discard queue", q.Discarded))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("the end state is wrong:\n%w", err)
	}
	a.printf("final: every order has exactly one winner and the stock adds up")
	return nil
}
