package groupcommit

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestEveryItemSentOnceWithItsOwnOutcome runs many concurrent callers through
// one slot whose sends are held until a queue has formed, so the test also
// sees items share a send.
func TestEveryItemSentOnceWithItsOwnOutcome(t *testing.T) {
	t.Parallel()
	const callers = 200
	var (
		mu      sync.Mutex
		sent    = map[int]int{}
		maxSize int
	)
	release := make(chan struct{})
	errOdd := errors.New("odd")
	first := true
	held := 0 // items of the held first send
	c := New(1, 1, 64, nil, func(ctx context.Context, items []int) []error {
		mu.Lock()
		wait := first
		if first {
			held = len(items)
		}
		first = false
		mu.Unlock()
		if wait {
			<-release // hold the only slot so the others queue up
		}
		mu.Lock()
		defer mu.Unlock()
		maxSize = max(maxSize, len(items))
		errs := make([]error, len(items))
		for i, it := range items {
			sent[it]++
			if it%2 == 1 {
				errs[i] = errOdd
			}
		}
		return errs
	})
	var wg sync.WaitGroup
	results := make([]error, callers)
	started := make(chan struct{}, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			results[i] = c.Do(context.Background(), i)
		}()
	}
	for range callers {
		<-started
	}
	// Wait until every caller not in the held send is queued.
	for {
		mu.Lock()
		h := held
		mu.Unlock()
		if h > 0 && queued(c) == callers-h {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for i := range callers {
		if sent[i] != 1 {
			t.Fatalf("item %d sent %d times", i, sent[i])
		}
		if want := i%2 == 1; (results[i] != nil) != want || (want && !errors.Is(results[i], errOdd)) {
			t.Fatalf("item %d: err %v", i, results[i])
		}
	}
	if maxSize < 2 {
		t.Fatalf("no send carried more than one item (max %d)", maxSize)
	}
	if maxSize > 64 {
		t.Fatalf("a send carried %d items, over the cap of 64", maxSize)
	}
}

func TestLoneCallerSendsAtOnce(t *testing.T) {
	t.Parallel()
	calls := 0
	c := New(2, 1, 8, nil, func(ctx context.Context, items []string) []error {
		calls++
		return make([]error, len(items))
	})
	for range 3 {
		if err := c.Do(context.Background(), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 3 {
		t.Fatalf("calls = %d, want 3 (one per sequential Do)", calls)
	}
}

// TestSizeCapAndAbandon: with a slot held, queued items of weight 3 under a
// cap of 7 go out at most two per send, and an item whose caller gave up
// while it waited is never sent.
func TestSizeCapAndAbandon(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		sends [][]int
		first = true
	)
	c := New(1, 1, 7, func(int) int { return 3 }, func(ctx context.Context, items []int) []error {
		mu.Lock()
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-release
		}
		mu.Lock()
		sends = append(sends, append([]int(nil), items...))
		mu.Unlock()
		return make([]error, len(items))
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Do(context.Background(), 0) }() // holds the slot
	for inFlight(c) == 0 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithCancel(context.Background())
	abandonedErr := make(chan error, 1)
	go func() { abandonedErr <- c.Do(ctx, 99) }()
	for queued(c) < 1 {
		runtime.Gosched()
	}
	cancel()
	if err := <-abandonedErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned Do = %v, want context.Canceled", err)
	}
	for i := 1; i <= 5; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Do(context.Background(), i) }()
	}
	for queued(c) < 6 { // the abandoned call is still in the queue
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	seen := map[int]bool{}
	for _, s := range sends {
		if 3*len(s) > 7 && len(s) > 1 {
			t.Fatalf("send %v is over the size cap", s)
		}
		for _, it := range s {
			if it == 99 {
				t.Fatal("the abandoned item was sent")
			}
			seen[it] = true
		}
	}
	if len(seen) != 6 {
		t.Fatalf("sent %v, want items 0-5 each once", sends)
	}
}

func inFlight[T any](c *Committer[T]) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

func queued[T any](c *Committer[T]) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// TestExtraSendNeedsABatch: beside a send in flight, waiting calls start a
// send of their own only once they weigh extra; fewer wait for the send in
// flight to finish, whose caller then takes them.
func TestExtraSendNeedsABatch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	sent := make(chan []int, 10)
	c := New(3, 4, 100, nil, func(ctx context.Context, items []int) []error {
		if items[0] == 0 {
			<-release
		}
		sent <- append([]int(nil), items...)
		return make([]error, len(items))
	})
	var wg sync.WaitGroup
	do := func(i int) { goDo(t, &wg, c, i) }
	do(0) // held until release
	for inFlight(c) == 0 {
		runtime.Gosched()
	}
	for i := 1; i <= 3; i++ {
		do(i)
	}
	for queued(c) < 3 {
		runtime.Gosched()
	}
	// Each of the three decided under the lock, as it queued, to wait.
	if n := inFlight(c); n != 1 {
		t.Fatalf("%d sends in flight with 3 calls waiting under extra 4, want 1", n)
	}
	do(4) // the fourth makes a batch worth a send of its own
	select {
	case got := <-sent:
		slices.Sort(got)
		if !slices.Equal(got, []int{1, 2, 3, 4}) {
			t.Fatalf("second send carried %v, want [1 2 3 4]", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no second send while the first was held, with 4 calls waiting")
	}
	do(5) // under extra again: waits for a send to finish
	for queued(c) < 1 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	close(sent)
	var rest [][]int
	for s := range sent {
		rest = append(rest, s)
	}
	if len(rest) != 2 || len(rest[0]) != 1 || rest[0][0] != 0 || len(rest[1]) != 1 || rest[1][0] != 5 {
		t.Fatalf("after the release: sends %v, want [0] then [5]", rest)
	}
}

// goDo calls c.Do(i) in a goroutine counted by wg; an error fails t.
func goDo(t *testing.T, wg *sync.WaitGroup, c *Committer[int], i int) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Do(context.Background(), i); err != nil {
			t.Error(err)
		}
	}()
}

// heldSends is a send func that records every batch and holds the one
// whose first item is 0 until release is closed.
type heldSends struct {
	release chan struct{}
	mu      sync.Mutex
	sends   [][]int
}

func newHeldSends() *heldSends { return &heldSends{release: make(chan struct{})} }

func (h *heldSends) send(ctx context.Context, items []int) []error {
	if items[0] == 0 {
		<-h.release
	}
	h.mu.Lock()
	h.sends = append(h.sends, append([]int(nil), items...))
	h.mu.Unlock()
	return make([]error, len(items))
}

func (h *heldSends) snapshot() [][]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]int(nil), h.sends...)
}
