package wake_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/wake"
)

// TestOneSignalWakesOneWaiter: five waiters sleep; each signal wakes
// exactly one, and the others stay blocked in Redis; cancelling the rest
// ends their commands at once and leaves no key behind.
func TestOneSignalWakesOneWaiter(t *testing.T) {
	t.Parallel()
	redistest.Client(t)
	opts, _, _ := redistest.Options()
	name := "cvt-wake-" + redistest.Prefix(t)[4:]
	opts.ClientName = name
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	key := redistest.Prefix(t) + ":{q}:wake"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type out struct {
		woke bool
		err  error
	}
	outs := make(chan out, 5)
	for range 5 {
		w := wake.NewWaiter(c, key)
		go func() {
			woke, err := w.Wait(ctx, time.Minute)
			outs <- out{woke, err}
		}()
	}
	redistest.Eventually(t, "5 waiters blocked", func() bool { return redistest.Blocked(t, c, name, "bzpopmin") == 5 })
	for i := range 2 {
		if err := wake.Signal(context.Background(), c, key); err != nil {
			t.Fatal(err)
		}
		select {
		case o := <-outs:
			if !o.woke || o.err != nil {
				t.Fatalf("signal %d: a waiter returned woke=%v, %v; want woken", i, o.woke, o.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("signal %d woke no waiter within 5s", i)
		}
		redistest.Eventually(t, "the others still blocked", func() bool { return redistest.Blocked(t, c, name, "bzpopmin") == 4-i })
		if len(outs) != 0 {
			t.Fatalf("signal %d woke more than one waiter", i)
		}
	}
	cancel()
	for range 3 {
		select {
		case o := <-outs:
			if o.woke || o.err != context.Canceled {
				t.Fatalf("a cancelled waiter returned woke=%v, %v; want context.Canceled", o.woke, o.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a cancelled waiter did not return within 5s")
		}
	}
	redistest.Eventually(t, "no waiter blocked", func() bool { return redistest.Blocked(t, c, name, "bzpopmin") == 0 })
	if n, err := c.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Errorf("the signal key is there (%d, %v) after both signals were taken", n, err)
	}
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	w := wake.NewWaiter(c, redistest.Prefix(t)+":{q}:wake")
	woke, err := w.Wait(context.Background(), 20*time.Millisecond)
	if woke || err != nil {
		t.Fatalf("Wait with no signal = %v, %v; want false, nil", woke, err)
	}
}

// TestSignalBeforeWait: a signal nobody waited for wakes the next waiter at
// once.
func TestSignalBeforeWait(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	key := redistest.Prefix(t) + ":{q}:wake"
	if err := wake.Signal(context.Background(), c, key); err != nil {
		t.Fatal(err)
	}
	if woke, err := wake.NewWaiter(c, key).Wait(context.Background(), time.Minute); !woke || err != nil {
		t.Fatalf("Wait after a signal = %v, %v; want true, nil", woke, err)
	}
}
