package brokertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// sleepResult is what a Sleep run in the background returned.
type sleepResult struct {
	woken bool
	err   error
}

// sleepInBackground runs s.Sleep(ctx) in a goroutine and returns its
// result on the channel.
func sleepInBackground(ctx context.Context, s broker.Sleeper) <-chan sleepResult {
	res := make(chan sleepResult, 1)
	go func() {
		woken, err := s.Sleep(ctx)
		res <- sleepResult{woken, err}
	}()
	return res
}

// awaitWoken fails t unless res, a Sleep, ends woken within 5 s.
func awaitWoken(t *testing.T, what string, res <-chan sleepResult) {
	t.Helper()
	select {
	case r := <-res:
		if r.err != nil || !r.woken {
			t.Fatalf("Sleep %s = %v, %v; want woken", what, r.woken, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Sleep %s did not return within 5s", what)
	}
}

// testSleep proves a consumer that implements broker.Sleeper sleeps on an
// empty queue (kept: until a job comes), is woken when a job is stored,
// leases nothing (the job stays ready and the next Fetch gets it), is
// woken at once after a Wake, and returns ctx.Err() for a done context and
// broker.ErrClosed once closed; and that a consumer that is not kept is
// woken by a job too, not only when its own wait for it runs out.
func testSleep(t *testing.T, e *env) {
	const q = "sleep"
	ctx := Context(t, time.Minute)
	c := Open(t, e.d, q, &broker.ConsumerOptions{Kept: true})
	s, ok := c.(broker.Sleeper)
	if !ok {
		t.Skipf("the consumer (%T) does not implement broker.Sleeper", c)
	}
	ExpectNone(t, c, 100*time.Millisecond) // a caller sleeps after a Fetch found nothing

	slept := sleepInBackground(ctx, s)
	select {
	case r := <-slept:
		t.Fatalf("Sleep on an empty queue returned %v, %v before any job came", r.woken, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	m := NewMessage(q, 1)
	Enqueue(t, e.d, m)
	awaitWoken(t, "woken by a job", slept)
	if x, ok := e.d.(broker.Inspector); ok {
		if got := sizesOf(t, x, q); got.Ready != 1 || got.InFlight != 0 {
			t.Fatalf("after Sleep: ready %d, in flight %d; want 1 and 0 (Sleep leases nothing)", got.Ready, got.InFlight)
		}
	}
	// A wake-up given back while the job waits wakes the next Sleep at
	// once (the job's own signal was taken by the Sleep above).
	if err := s.Wake(ctx); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	awaitWoken(t, "after Wake", sleepInBackground(ctx, s))
	d := FetchOne(t, c, 5*time.Second)
	if d.ID != m.ID {
		t.Fatalf("Fetch after Sleep got %s, want %s", d.ID, m.ID)
	}
	if err := c.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Sleep(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with a done context = %v, want context.Canceled", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sleep(ctx); !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Sleep after Close = %v, want broker.ErrClosed", err)
	}

	// Not kept: the job wakes the sleep, which reports it (a sleep that
	// merely ran out reports false).
	const q2 = "sleep-unkept"
	c2 := Open(t, e.d, q2, nil)
	s2 := c2.(broker.Sleeper)
	slept = sleepInBackground(ctx, s2)
	m2 := NewMessage(q2, 1)
	Enqueue(t, e.d, m2)
	awaitWoken(t, "not kept, woken by a job", slept)
	if d := FetchOne(t, c2, 5*time.Second); d.ID != m2.ID {
		t.Fatalf("Fetch after Sleep got %s, want %s", d.ID, m2.ID)
	} else if err := c2.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
}
