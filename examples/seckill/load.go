package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/conveyorq/conveyor"
)

// report is what a load run saw and counted.
type report struct {
	Items, Buyers, Concurrency int
	DB                         string // "SQLite /path" or "PostgreSQL url"

	// The rush: every request's answer, how long the rush took and each
	// request (front door and gate).
	Requests int
	Outcomes [outcomes]int
	Rush     time.Duration
	P50, P99 time.Duration
	Max      time.Duration
	// MinLeft is the lowest stock the gate reported after placing an order.
	MinLeft int64
	// LeftAfterRush and ReturnedInRush are the stock and the units given
	// back by cancelled orders (timed out, or refused by the database) when
	// the rush ended, read together: every unit the gate handed out is one
	// placed order, so placed = Items + ReturnedInRush - LeftAfterRush.
	// ReturnedInRush is 0 unless a payment window ended during the rush.
	LeftAfterRush, ReturnedInRush int64

	// WrittenIn is how long after the first order was placed the last one
	// was written.
	WrittenIn time.Duration
	// The database once the run was over.
	Orders, Users, Paid, Unpaid, Cancelled int64
	// Redis once the run was over: users holding an order, stock left.
	Holders, Left int64
	// TimersPending counts the payment timers still pending.
	TimersPending int64
	// The consumers' counters (every process), and how often this process's
	// write limiter postponed an order write.
	Stats     saleStats
	Postponed int64

	// The payments.
	PaidNow, TooLate, NotWritten, TimersCancelled int
}

// load runs the load generator: the sale opens, Buyers buyers rush it,
// the orders are written, some are paid, the others time out.
func (a *app) load(ctx context.Context) (*report, error) {
	cfg := a.cfg
	rep := &report{Items: cfg.Items, Buyers: cfg.Buyers, Concurrency: cfg.Concurrency, DB: a.store.kind + " " + a.store.where}
	if err := a.shop.open(ctx, cfg.Sale, cfg.Items); err != nil {
		return nil, err
	}
	orders, err := a.rush(ctx, rep)
	if err != nil {
		return rep, err
	}
	if err := a.waitAllWritten(ctx, len(orders)); err != nil {
		return rep, err
	}
	if err := a.payOldest(ctx, rep, orders); err != nil {
		return rep, err
	}
	if !cfg.NoTimeoutWait {
		if err := waitFor(ctx, cfg.PaymentWindow+cfg.Timeout, "unpaid orders to time out", func() (bool, error) {
			sum, err := a.store.summary(ctx, cfg.Sale)
			return sum.Unpaid == 0, err
		}); err != nil {
			return rep, err
		}
	}
	return rep, a.summarize(ctx, rep)
}

// buyer returns the user ID, IP address and clicks of buyer i.
func (a *app) buyer(i int) (user, ip string, clicks int) {
	cfg := a.cfg
	user = fmt.Sprintf("u%05d", i)
	if cfg.HotIPEvery > 0 && i%cfg.HotIPEvery == cfg.HotIPEvery/2 {
		ip = "203.0.113.7"
	} else {
		n := i / cfg.BuyersPerIP
		ip = fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
	}
	clicks = 1
	if cfg.RepeatEvery > 0 && i%cfg.RepeatEvery == 0 {
		clicks = 3
	}
	return user, ip, clicks
}

// rush sends every buyer's requests, Concurrency buyers at a time, and
// returns the orders placed, oldest first.
func (a *app) rush(ctx context.Context, rep *report) ([]string, error) {
	cfg := a.cfg
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		orders  []string
		lat     []time.Duration
		minLeft = int64(math.MaxInt64)
		wg      sync.WaitGroup
		next    = make(chan int)
	)
	start := time.Now()
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				mine   []time.Duration
				counts [outcomes]int
				won    []string
				low    = int64(math.MaxInt64)
			)
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				lat = append(lat, mine...)
				for o, n := range counts {
					rep.Outcomes[o] += n
				}
				orders = append(orders, won...)
				minLeft = min(minLeft, low)
			}()
			for i := range next {
				if cfg.beforeBuyer != nil {
					if err := cfg.beforeBuyer(ctx, i); err != nil {
						cancel(fmt.Errorf("buyer %d: %w", i, err))
						return
					}
				}
				user, ip, clicks := a.buyer(i)
				for range clicks {
					t0 := time.Now()
					r, err := a.request(ctx, user, ip)
					mine = append(mine, time.Since(t0))
					if err != nil {
						cancel(fmt.Errorf("buyer %s: %w", user, err))
						return
					}
					counts[r.Outcome]++
					if r.Outcome == placed {
						won = append(won, r.Order)
						low = min(low, r.Left)
					}
				}
			}
		}()
	}
feed:
	for i := range cfg.Buyers {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	rep.Rush = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	rep.Requests = len(lat)
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		rep.P50, rep.P99, rep.Max = lat[n/2], lat[n*99/100], lat[n-1]
	}
	if len(orders) > 0 {
		rep.MinLeft = minLeft
	}
	// Timers keep firing after the rush; what it sold is read now.
	var err error
	if rep.LeftAfterRush, rep.ReturnedInRush, err = a.shop.stockAndReturned(ctx, cfg.Sale); err != nil {
		return nil, err
	}
	slices.Sort(orders) // IDs sort by the time they were placed
	return orders, nil
}

// waitAllWritten waits until n orders were handled to the end (row written,
// timer scheduled) and nothing is left in the queue's stream: no order job
// ready or in flight.
func (a *app) waitAllWritten(ctx context.Context, n int) error {
	return waitFor(ctx, a.cfg.Timeout, fmt.Sprintf("%d orders written", n), func() (bool, error) {
		st, err := a.shop.stats(ctx, a.cfg.Sale)
		if err != nil || st.Done < int64(n) {
			return false, err
		}
		left, err := a.rdb.XLen(ctx, a.shop.streamKey).Result()
		return left == 0, err
	})
}

// payOldest pays PayFraction of the orders, the oldest first, 16 at a time.
func (a *app) payOldest(ctx context.Context, rep *report, orders []string) error {
	if a.cfg.PayFraction <= 0 {
		return nil
	}
	n := int(math.Round(a.cfg.PayFraction * float64(len(orders))))
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan string)
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for order := range next {
				res, cancelled, err := a.shop.pay(ctx, a.store, a.cfg.Sale, order)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case res == payOK:
					rep.PaidNow++
					if cancelled {
						rep.TimersCancelled++
					}
				case res == payTooLate:
					rep.TooLate++
				case res == payNotWritten:
					rep.NotWritten++
				}
				mu.Unlock()
			}
		}()
	}
	for _, o := range orders[:n] {
		next <- o
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// summarize reads what the database and Redis hold at the end.
func (a *app) summarize(ctx context.Context, rep *report) error {
	sum, err := a.store.summary(ctx, a.cfg.Sale)
	if err != nil {
		return err
	}
	rep.Orders, rep.Users, rep.Paid, rep.Unpaid, rep.Cancelled = sum.Orders, sum.Users, sum.Paid, sum.Unpaid, sum.Cancelled
	if !sum.FirstPlaced.IsZero() {
		rep.WrittenIn = sum.LastWritten.Sub(sum.FirstPlaced)
	}
	if rep.Left, err = a.shop.stock(ctx, a.cfg.Sale); err != nil {
		return err
	}
	if rep.Holders, err = a.shop.buyers(ctx, a.cfg.Sale); err != nil {
		return err
	}
	if rep.Stats, err = a.shop.stats(ctx, a.cfg.Sale); err != nil {
		return err
	}
	rep.Postponed = a.postponed.Load()
	page, err := a.insp.Jobs(ctx, queue, conveyor.JobDelayed, &conveyor.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	rep.TimersPending = page.Total
	return nil
}

// sold is the units the rush sold for good: the orders placed, less the
// units that came back from cancelled orders while it was on (and were
// offered again). It equals Items less what was left when the rush ended.
func (r *report) sold() int64 {
	return int64(r.Outcomes[placed]) - r.ReturnedInRush
}

// violations lists the invariants the run broke.
func (r *report) violations() []string {
	var bad []string
	placedN := int64(r.Outcomes[placed])
	if r.Orders != placedN {
		bad = append(bad, fmt.Sprintf("%d orders placed but %d in the database", placedN, r.Orders))
	}
	if r.Users != r.Orders {
		bad = append(bad, fmt.Sprintf("%d orders for %d distinct users: a user twice", r.Orders, r.Users))
	}
	if r.Holders != placedN {
		bad = append(bad, fmt.Sprintf("%d orders placed but %d users hold one in Redis", placedN, r.Holders))
	}
	if r.Left < 0 || r.MinLeft < 0 || r.LeftAfterRush < 0 {
		bad = append(bad, fmt.Sprintf("stock went negative: %d left, lowest %d", r.Left, r.MinLeft))
	}
	// Sold equals stock: each unit the gate handed out is one placed order,
	// so the orders placed are the items plus the units given back during
	// the rush, less what it left. More orders would be an oversell.
	if r.sold() != int64(r.Items)-r.LeftAfterRush {
		bad = append(bad, fmt.Sprintf("%d orders placed, but %d items + %d given back during the rush - %d left after it = %d: oversold or lost",
			placedN, r.Items, r.ReturnedInRush, r.LeftAfterRush, int64(r.Items)+r.ReturnedInRush-r.LeftAfterRush))
	}
	if r.Paid+r.Unpaid+r.Left != int64(r.Items) {
		bad = append(bad, fmt.Sprintf("paid %d + unpaid %d + left %d != %d items: oversold or lost", r.Paid, r.Unpaid, r.Left, r.Items))
	}
	return bad
}

func (r *report) print(w io.Writer) {
	rate := float64(r.Requests) / r.Rush.Seconds()
	fmt.Fprintf(w, "seckill load: %d buyers, %d at a time, for %d items; orders in %s\n", r.Buyers, r.Concurrency, r.Items, r.DB)
	fmt.Fprintf(w, "rush:      %d requests in %v (%.0f/s); per request p50 %v, p99 %v, max %v\n",
		r.Requests, r.Rush.Round(time.Millisecond), rate, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond))
	fmt.Fprintf(w, "answers:   %s\n", outcomeCounts(r.Outcomes[:]))
	placedN := r.Outcomes[placed]
	if r.ReturnedInRush == 0 {
		fmt.Fprintf(w, "sold:      %d of %d items, one order each; %d left when the rush ended\n", r.sold(), r.Items, r.LeftAfterRush)
	} else {
		// A payment window ended while buyers were still rushing: the unit
		// of each unpaid order that timed out went back on sale.
		fmt.Fprintf(w, "sold:      %d of %d items held by orders when the rush ended, %d left; %d orders placed = %d items + %d units given back during the rush by cancelled orders - %d left\n",
			r.sold(), r.Items, r.LeftAfterRush, placedN, r.Items, r.ReturnedInRush, r.LeftAfterRush)
	}
	fmt.Fprintf(w, "database:  %d orders, %d distinct users; the last written %v after the first was placed\n",
		r.Orders, r.Users, r.WrittenIn)
	fmt.Fprintf(w, "consumers: %d written, %d replayed (row already there), %d refused by the database; %d writes postponed by the write limit here\n",
		r.Stats.Written, r.Stats.Replayed, r.Stats.DBRejected, r.Postponed)
	fmt.Fprintf(w, "payments:  %d paid (%d timers cancelled before firing), %d too late; %d orders timed out and gave their item back; %d timers pending\n",
		r.PaidNow, r.TimersCancelled, r.TooLate, r.Stats.TimedOut, r.TimersPending)
	fmt.Fprintf(w, "stock:     %d items = %d paid + %d unpaid + %d left; lowest stock after an order: %d\n",
		r.Items, r.Paid, r.Unpaid, r.Left, r.MinLeft)
	if bad := r.violations(); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintf(w, "VIOLATION: %s\n", b)
		}
		return
	}
	fmt.Fprintf(w, "checks:    sold %d = %d items - %d left after the rush; %d orders placed = %d in the database; no user twice; stock never negative; paid + unpaid + left = items, no oversell: OK\n",
		r.sold(), r.Items, r.LeftAfterRush, placedN, r.Orders)
}
