package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// story plays a small sale step by step: every refusal, a payment winning
// its race, a timeout winning another and its unit sold again.
func (a *app) story(ctx context.Context) error {
	cfg := a.cfg
	out := &syncWriter{w: cfg.Out}
	sale := cfg.Sale
	fmt.Fprintf(out, "seckill: sale %s opens with %d items; payment window %v; orders in %s (%s)\n",
		sale, cfg.Items, cfg.PaymentWindow, a.store.kind, a.store.where)
	fmt.Fprintf(out, "front door: %d requests per %v per IP, %d per user\n", cfg.IPLimit, cfg.LimitPeriod, cfg.UserLimit)
	if err := a.shop.open(ctx, sale, cfg.Items); err != nil {
		return err
	}

	orders := map[string]string{} // user -> order
	try := func(user, ip, what string) (buyResult, error) {
		r, err := a.request(ctx, user, ip)
		if err != nil {
			return r, err
		}
		switch r.Outcome {
		case placed:
			orders[user] = r.Order
			fmt.Fprintf(out, "%-6s %s: placed order %s (%d left)\n", user, what, r.Order, r.Left)
		case duplicate:
			fmt.Fprintf(out, "%-6s %s: refused, %s (holds order %s)\n", user, what, r.Outcome, r.Order)
		default:
			fmt.Fprintf(out, "%-6s %s: refused, %s\n", user, what, r.Outcome)
		}
		return r, nil
	}
	steps := []struct{ user, ip, what string }{
		{"alice", "192.0.2.1", "buys"},
		{"alice", "192.0.2.1", "buys again"},
		{"bob", "192.0.2.2", "buys"},
		{"carol", "192.0.2.3", "buys"},
		{"dave", "192.0.2.4", "buys"},
		{"dave", "192.0.2.4", "buys again"},
		{"dave", "192.0.2.4", "buys a third time"},
	}
	for _, s := range steps {
		if _, err := try(s.user, s.ip, s.what); err != nil {
			return err
		}
	}
	// A bot farm behind one address: the per-IP limit stops it whatever
	// user names it makes up.
	const bots, botIP = 40, "203.0.113.7"
	var byOutcome [outcomes]int
	for i := range bots {
		r, err := a.request(ctx, fmt.Sprintf("bot%02d", i), botIP)
		if err != nil {
			return err
		}
		byOutcome[r.Outcome]++
	}
	fmt.Fprintf(out, "%d bots behind %s buy: %s\n", bots, botIP, outcomeCounts(byOutcome[:]))

	first := []string{"alice", "bob", "carol"}
	if err := a.waitWritten(ctx, orders, first...); err != nil {
		return err
	}
	fmt.Fprintf(out, "database: orders of %s written (unpaid); their payment timers run\n", strings.Join(first, ", "))
	for _, user := range []string{"alice", "bob"} {
		if err := a.payStory(ctx, out, user, orders[user]); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "carol  does not pay")
	if err := waitFor(ctx, cfg.PaymentWindow+cfg.Timeout, "carol's order to time out", func() (bool, error) {
		st, ok, err := a.store.status(ctx, orders["carol"])
		return ok && st == stateCancelled, err
	}); err != nil {
		return err
	}
	left, err := a.shop.stock(ctx, sale)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "carol  order %s timed out: cancelled, its item is back (%d left)\n", orders["carol"], left)
	if _, err := try("erin", "192.0.2.5", "buys"); err != nil {
		return err
	}
	if err := a.waitWritten(ctx, orders, "erin"); err != nil {
		return err
	}
	if err := a.payStory(ctx, out, "erin", orders["erin"]); err != nil {
		return err
	}
	// A late payment: the timer won this race, so the payment does nothing.
	if err := a.payStory(ctx, out, "carol", orders["carol"]); err != nil {
		return err
	}

	var rows []string
	for _, user := range []string{"alice", "bob", "carol", "erin"} {
		st, _, err := a.store.status(ctx, orders[user])
		if err != nil {
			return err
		}
		rows = append(rows, user+" "+st)
	}
	sum, err := a.store.summary(ctx, sale)
	if err != nil {
		return err
	}
	if left, err = a.shop.stock(ctx, sale); err != nil {
		return err
	}
	fmt.Fprintf(out, "final: database has %d orders (%s); %d left in stock\n", sum.Orders, strings.Join(rows, ", "), left)
	if sum.Paid+sum.Unpaid+left != int64(cfg.Items) || left < 0 || sum.Users != sum.Orders {
		return fmt.Errorf("invariants broken: paid %d + unpaid %d + left %d != %d items, or %d users for %d orders",
			sum.Paid, sum.Unpaid, left, cfg.Items, sum.Users, sum.Orders)
	}
	fmt.Fprintf(out, "check: paid %d + unpaid %d + left %d = %d items; %d orders, %d distinct users: OK\n",
		sum.Paid, sum.Unpaid, left, cfg.Items, sum.Orders, sum.Users)
	return nil
}

// request is one buy request: the front door, then the gate.
func (a *app) request(ctx context.Context, user, ip string) (buyResult, error) {
	o, err := a.door.admit(ctx, user, ip)
	if err != nil || o != placed {
		return buyResult{Outcome: o}, err
	}
	return a.shop.buy(ctx, a.cfg.Sale, user, ip)
}

// waitWritten waits until the orders of users are in the database with
// their payment timers running.
func (a *app) waitWritten(ctx context.Context, orders map[string]string, users ...string) error {
	return waitFor(ctx, a.cfg.Timeout, "orders of "+strings.Join(users, ", ")+" in the database", func() (bool, error) {
		for _, u := range users {
			if ok, err := a.shop.isDone(ctx, a.cfg.Sale, orders[u]); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	})
}

func (a *app) payStory(ctx context.Context, out io.Writer, user, order string) error {
	res, cancelled, err := a.shop.pay(ctx, a.store, a.cfg.Sale, order)
	if err != nil {
		return err
	}
	switch res {
	case payOK:
		fmt.Fprintf(out, "%-6s pays order %s: paid; payment timer cancelled before it fired: %v\n", user, order, cancelled)
	case payTooLate:
		fmt.Fprintf(out, "%-6s pays order %s: too late, the timer won and the order is cancelled\n", user, order)
	case payAlready:
		fmt.Fprintf(out, "%-6s pays order %s: paid already\n", user, order)
	case payNotWritten:
		fmt.Fprintf(out, "%-6s pays order %s: not in the database yet\n", user, order)
	}
	return nil
}

// outcomeCounts formats the non-zero counts of each outcome.
func outcomeCounts(n []int) string {
	var parts []string
	for o, c := range n {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, outcome(o)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
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
