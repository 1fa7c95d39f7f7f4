package conveyor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A timer's ID is its business key: a second timer with a pending ID is
// refused, Cancel wins once, and the ID is free again afterwards.
func TestTimerByBusinessKey(t *testing.T) {
	t.Parallel()
	c, d, _, _ := newClient(t, nil)
	ctx := context.Background()
	opts := &conveyor.EnqueueOptions{ID: "order:123:timeout", Delay: time.Hour}
	if _, err := c.Enqueue(ctx, "order.timeout", nil, opts); err != nil {
		t.Fatal(err)
	}
	_, err := c.Enqueue(ctx, "order.timeout", nil, opts)
	var de *broker.DuplicateError
	if !errors.Is(err, conveyor.ErrDuplicate) || !errors.As(err, &de) || de.ID != "order:123:timeout" || de.Queue != "default" {
		t.Fatalf("second timer with the same ID: %v, want a *broker.DuplicateError naming it", err)
	}
	if ok, err := c.Reschedule(ctx, "", "order:123:timeout", time.Now().Add(2*time.Hour)); err != nil || !ok {
		t.Fatalf("Reschedule of a pending timer: %v, %v; want true", ok, err)
	}
	ms, n, err := d.(broker.Timers).PendingTimers(ctx, "default", 0, 10)
	if err != nil || n != 1 || len(ms) != 1 || time.Until(ms[0].RunAt) < 119*time.Minute {
		t.Fatalf("pending after Reschedule: %v (%d), %v; want one timer due in 2h", ms, n, err)
	}
	if ok, err := c.Cancel(ctx, "", "order:123:timeout"); err != nil || !ok {
		t.Fatalf("Cancel of a pending timer: %v, %v; want true", ok, err)
	}
	if ok, err := c.Cancel(ctx, "", "order:123:timeout"); err != nil || ok {
		t.Fatalf("second Cancel: %v, %v; want false", ok, err)
	}
	if ok, err := c.Reschedule(ctx, "", "order:123:timeout", time.Now()); err != nil || ok {
		t.Fatalf("Reschedule of a cancelled timer: %v, %v; want false", ok, err)
	}
	if _, err := c.Enqueue(ctx, "order.timeout", nil, opts); err != nil {
		t.Fatalf("timer with the ID of a cancelled one: %v", err)
	}
	if _, err := c.Reschedule(ctx, "", "order:123:timeout", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, conveyor.ErrInvalidMessage) {
		t.Fatalf("Reschedule to the year 9999: %v, want ErrInvalidMessage", err)
	}
	if _, err := c.Cancel(ctx, "", "order:{1}"); !errors.Is(err, conveyor.ErrInvalidMessage) {
		t.Fatalf("Cancel of an ID with braces: %v, want ErrInvalidMessage", err)
	}
}

// Concurrent Enqueue calls travel together (group commit); a refused
// duplicate timer fails only the call that sent it.
func TestDuplicateTimerFailsOnlyItsCall(t *testing.T) {
	t.Parallel()
	c, d, _, _ := newClient(t, nil)
	ctx := context.Background()
	const n = 40
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "same"
			if i%2 == 1 {
				id = fmt.Sprintf("own-%d", i)
			}
			_, errs[i] = c.Enqueue(ctx, "k", nil, &conveyor.EnqueueOptions{ID: id, Delay: time.Hour})
		}()
	}
	wg.Wait()
	stored := 0
	for i, err := range errs {
		switch {
		case i%2 == 1 && err != nil:
			t.Errorf("call %d with its own ID failed: %v", i, err)
		case i%2 == 0 && err == nil:
			stored++
		case i%2 == 0 && !errors.Is(err, conveyor.ErrDuplicate):
			t.Errorf("call %d with the shared ID: %v, want ErrDuplicate", i, err)
		}
	}
	if stored != 1 {
		t.Fatalf("%d calls stored the shared ID, want 1", stored)
	}
	if _, total, err := d.(broker.Timers).PendingTimers(ctx, "default", 0, 1); err != nil || total != n+1 {
		t.Fatalf("%d timers pending, %v; want %d", total, err, n+1)
	}
}

func TestCancelWithoutTimers(t *testing.T) {
	t.Parallel()
	d, err := pubsub.New(redistest.Client(t), &pubsub.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := conveyor.NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(context.Background(), "q", "x"); !errors.Is(err, conveyor.ErrUnsupported) {
		t.Fatalf("Cancel on the pubsub driver: %v, want ErrUnsupported", err)
	}
}

// A unique key refuses every other job with the key while it is held:
// 100 enqueues from 10 goroutines store one job, whatever round trips they
// share.
func TestUniqueKeyStoresOnce(t *testing.T) {
	t.Parallel()
	c, d, _, _ := newClient(t, nil)
	ctx := context.Background()
	var mu sync.Mutex
	stored, refused := 0, 0
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 10 {
				_, err := c.Enqueue(ctx, "charge", nil, &conveyor.EnqueueOptions{UniqueKey: "charge:order:7", UniqueFor: time.Minute})
				var de *broker.DuplicateError
				mu.Lock()
				switch {
				case err == nil:
					stored++
				case errors.Is(err, conveyor.ErrDuplicate) && errors.As(err, &de) && de.Key == "charge:order:7":
					refused++
				default:
					t.Errorf("Enqueue: %v, want nil or a DuplicateError naming the key", err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if stored != 1 || refused != 99 {
		t.Fatalf("%d stored, %d refused; want 1 and 99", stored, refused)
	}
	c2, err := d.Open(ctx, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ds, err := c2.Fetch(fctx, 100)
	if err != nil || len(ds) != 1 {
		t.Fatalf("fetched %d jobs, %v; want the one stored", len(ds), err)
	}
	// Other keys and jobs without a key are not affected.
	if _, err := c.Enqueue(ctx, "charge", nil, &conveyor.EnqueueOptions{UniqueKey: "charge:order:8"}); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if _, err := c.Enqueue(ctx, "charge", nil, &conveyor.EnqueueOptions{UniqueKey: "charge:{8}"}); !errors.Is(err, conveyor.ErrInvalidMessage) {
		t.Fatalf("a unique key with braces: %v, want ErrInvalidMessage", err)
	}
}
