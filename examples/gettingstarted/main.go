// Command gettingstarted is the program docs/getting-started.md walks
// through, step by step: a handler, enqueue, a worker pool, a delayed job
// and its cancel, retries, the discard queue and the Inspector. Every Go
// block of the guide is a piece of this package, and a test checks that
// they stay the same.
//
//	go run ./examples/gettingstarted
//
// It uses REDIS_URL, else a Redis on 127.0.0.1:6379, else an embedded
// in-memory Redis (with a loud warning); it deletes its keys before it exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/retry"
	"github.com/conveyorq/conveyor/worker"
)

// What the program needs besides the guide's code: its main, its fake mail
// server and its clean-up.
import (
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/conveyorq/conveyor/examples/internal/devredis"
)

func main() {
	ctx := context.Background()
	rdb, cleanup, err := devredis.Connect(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gettingstarted:", err)
		os.Exit(1)
	}
	prefix := "gettingstarted-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	err = run(ctx, rdb, prefix, os.Stdout)
	cleanupKeys(ctx, rdb, prefix)
	cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gettingstarted:", err)
		os.Exit(1)
	}
}

// Receipt is the payload of an "email.receipt" job.
type Receipt struct {
	OrderID string `json:"order_id"`
	Email   string `json:"email"`
}

// Receipts handles "email.receipt" jobs.
type Receipts struct {
	Mail *Mailer
}

// Send e-mails a receipt. Returning nil acks the job; returning an error
// retries it later, until the pool's rules give up and discard it.
func (h *Receipts) Send(ctx context.Context, job *conveyor.Job, r Receipt) error {
	if r.Email == "" {
		// Retrying cannot fix this: discard the job at once.
		return conveyor.SkipRetry(errors.New("receipt without an e-mail address"))
	}
	return h.Mail.Send(ctx, r.Email, "Your receipt for order "+r.OrderID)
}

// Reminder is the payload of an "email.reminder" job.
type Reminder struct {
	OrderID string `json:"order_id"`
}

// run is the guide's program, on rdb under the key prefix prefix.
func run(ctx context.Context, rdb redis.UniversalClient, prefix string, out io.Writer) error {
	out = &syncWriter{w: out} // handlers print from the pool's goroutines
	mail := &Mailer{Out: out}

	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		return err
	}

	mux := worker.NewMux()
	worker.HandleJSON(mux, "email.receipt", (&Receipts{Mail: mail}).Send)
	worker.HandleJSON(mux, "email.reminder", func(ctx context.Context, job *conveyor.Job, r Reminder) error {
		return mail.Send(ctx, "customer-of-"+r.OrderID+"@example.com", "Your order "+r.OrderID+" is waiting for payment")
	})

	client, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "emails"})
	if err != nil {
		return err
	}
	msg, err := client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "1001", Email: "ada@example.com"}, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "enqueued %s as job %s\n", msg.Kind, msg.ID)

	pool, err := worker.NewPool(d, mux, &worker.Config{
		Queue:       "emails",
		Concurrency: 10,
		Retry: &retry.Rules{
			Policy:      retry.Exponential{Base: 100 * time.Millisecond, Max: time.Second},
			MaxAttempts: 3,
		},
		OnDiscard: func(ctx context.Context, job *conveyor.Job, reason string) {
			fmt.Fprintf(out, "discarded %s (%s): %s\n", job.ID, job.Kind, reason)
		},
	})
	if err != nil {
		return err
	}
	poolCtx, stopPool := context.WithCancel(ctx)
	poolDone := make(chan error, 1)
	go func() { poolDone <- pool.Run(poolCtx) }()
	defer func() {
		stopPool()
		<-poolDone
	}()

	// A timer keyed by the order: remind the customer in 500ms unless
	// they pay first.
	for _, order := range []string{"1002", "1003"} {
		_, err = client.Enqueue(ctx, "email.reminder", Reminder{OrderID: order}, &conveyor.EnqueueOptions{
			ID:    "order:" + order + ":reminder",
			Delay: 500 * time.Millisecond,
		})
		if err != nil {
			return err
		}
	}
	// Order 1002 is paid: no reminder. ok is false if it already fired.
	ok, err := client.Cancel(ctx, "", "order:1002:reminder")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "reminder for order 1002 cancelled before it fired: %v\n", ok)

	// Two receipts that fail: flaky.example fails once (retried), and
	// down.example fails every time (discarded after attempt 3).
	for _, email := range []string{"bob@flaky.example", "eve@down.example"} {
		if _, err := client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "1004", Email: email}, nil); err != nil {
			return err
		}
	}

	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		return err
	}
	if err := waitIdle(ctx, insp, "emails"); err != nil {
		return err
	}

	page, err := insp.Jobs(ctx, "emails", conveyor.JobDiscarded, nil)
	if err != nil {
		return err
	}
	for _, j := range page.Jobs {
		fmt.Fprintf(out, "in the discard queue: %s %s after attempt %d: %s\n", j.ID, j.Kind, j.Attempt(), j.Reason)
	}

	// down.example is back: run the discarded receipts again.
	mail.Fix("down.example")
	n, err := insp.Redrive(ctx, "emails", conveyor.DiscardFilter{Kind: "email.receipt"}, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "re-drove %d job(s)\n", n)
	if err := waitIdle(ctx, insp, "emails"); err != nil {
		return err
	}

	q, err := insp.Queue(ctx, "emails")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "queue emails: ready=%d in_flight=%d delayed=%d discarded=%d processed=%d failed=%d\n",
		q.Ready, q.InFlight, q.Delayed, q.Discarded, q.Processed, q.Failed)
	return nil
}

// waitIdle waits until queue has nothing ready, running or waiting for its
// time. The program enqueues nothing more meanwhile, so that lasts.
func waitIdle(ctx context.Context, insp *conveyor.Inspector, queue string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		q, err := insp.Queue(ctx, queue)
		if err != nil {
			return err
		}
		if q.Ready+q.InFlight+q.Delayed == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("queue %s still busy: %w", queue, ctx.Err())
		case <-tick.C:
		}
	}
}

// Mailer stands for an e-mail service. It prints what it sends to Out
// (when set) and records it. Addresses at flaky.example fail on their first
// try, those at down.example until Fix.
type Mailer struct {
	Out io.Writer

	mu    sync.Mutex
	sent  []string
	tries map[string]int
	fixed map[string]bool
}

// Send e-mails subject to the address to.
func (m *Mailer) Send(ctx context.Context, to, subject string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tries == nil {
		m.tries = map[string]int{}
	}
	m.tries[to]++
	domain := to[strings.LastIndexByte(to, '@')+1:]
	var err error
	switch {
	case domain == "flaky.example" && m.tries[to] == 1:
		err = fmt.Errorf("smtp %s: 451 try again later", domain)
	case domain == "down.example" && !m.fixed[domain]:
		err = fmt.Errorf("smtp %s: connection refused", domain)
	}
	if err != nil {
		if m.Out != nil {
			fmt.Fprintf(m.Out, "send to %s failed (try %d): %v\n", to, m.tries[to], err)
		}
		return err
	}
	m.sent = append(m.sent, to+": "+subject)
	if m.Out != nil {
		fmt.Fprintf(m.Out, "sent to %s (try %d): %s\n", to, m.tries[to], subject)
	}
	return nil
}

// Fix ends the outage of domain.
func (m *Mailer) Fix(domain string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fixed == nil {
		m.fixed = map[string]bool{}
	}
	m.fixed[domain] = true
}

// Sent returns what was sent, in order, as "address: subject".
func (m *Mailer) Sent() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.sent...)
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

// cleanupKeys deletes every key under prefix.
func cleanupKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}
