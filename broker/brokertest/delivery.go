package brokertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// testExclusive proves that concurrent consumers of one queue never hold the
// same message at once and that every message is acked exactly once.
func testExclusive(t *testing.T, e *env) {
	const q, consumers, total = "exclusive", 4, 2000
	cs := make([]broker.Consumer, consumers)
	for i := range cs {
		cs[i] = Open(t, e.d, q, nil)
	}
	msgs := make([]*broker.Message, total)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
	}
	for i := 0; i < total; i += 500 {
		Enqueue(t, e.d, msgs[i:i+500]...)
	}

	var (
		mu      sync.Mutex
		holder  = map[string]int{} // message ID -> consumer holding it
		acked   = map[string]int{}
		nacked  int
		fails   []string
		perCons = make([]int, consumers)
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(fails) < 20 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for ci, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ds, err := c.Fetch(ctx, 10)
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						fail("consumer %d: Fetch: %v", ci, err)
					}
					return
				}
				mu.Lock()
				for _, d := range ds {
					if h, ok := holder[d.ID]; ok {
						fails = append(fails, fmt.Sprintf("%s delivered to consumer %d while consumer %d holds it", d.ID, ci, h))
					}
					holder[d.ID] = ci
				}
				mu.Unlock()
				runtime.Gosched() // hold them a moment, as a handler would
				if err := c.Ack(ctx, ds...); err != nil {
					fail("consumer %d: Ack: %v", ci, err)
				}
				mu.Lock()
				for _, d := range ds {
					if holder[d.ID] == ci {
						delete(holder, d.ID)
					}
					acked[d.ID]++
				}
				nacked += len(ds)
				perCons[ci] += len(ds)
				if nacked >= total {
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	if len(acked) != total {
		t.Errorf("%d distinct messages acked, want %d (context: %v)", len(acked), total, context.Cause(ctx))
	}
	for id, n := range acked {
		if n != 1 {
			t.Errorf("%s acked %d times", id, n)
		}
	}
	t.Logf("deliveries per consumer: %v", perCons)
}

// testFanOut proves every consumer open before a publish receives every
// message, once.
func testFanOut(t *testing.T, e *env) {
	const q, consumers, total = "fanout", 3, 100
	cs := make([]broker.Consumer, consumers)
	for i := range cs {
		cs[i] = Open(t, e.d, q, nil)
	}
	msgs := make([]*broker.Message, total)
	for i := range msgs {
		msgs[i] = NewMessage(q, i)
	}
	Enqueue(t, e.d, msgs...)
	for ci, c := range cs {
		seen := map[string]bool{}
		ds := FetchN(t, c, total, 50, 10*time.Second)
		if err := c.Ack(Context(t, 5*time.Second), ds...); err != nil {
			t.Fatalf("consumer %d: Ack: %v", ci, err)
		}
		for _, d := range ds {
			if seen[d.ID] {
				t.Fatalf("consumer %d got %s twice", ci, d.ID)
			}
			seen[d.ID] = true
		}
		for _, m := range msgs {
			if !seen[m.ID] {
				t.Fatalf("consumer %d missed %s", ci, m.ID)
			}
		}
		ExpectNone(t, c, 200*time.Millisecond)
	}
}
