package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stressItem is one call's item: a unique id and a weight.
type stressItem struct {
	id   int
	size int
}

// stressRecorder is the send side of a stress run: it records what was
// sent and checks each batch as it goes out.
type stressRecorder struct {
	t        *testing.T
	slots    int
	max      int
	outcomes []error // the outcome send gives each id (nil or a unique error)

	mu      sync.Mutex
	sent    []int // sends per id
	inSend  atomic.Int32
	maxSeen atomic.Int32
}

func (r *stressRecorder) send(ctx context.Context, items []stressItem) []error {
	n := r.inSend.Add(1)
	defer r.inSend.Add(-1)
	for {
		m := r.maxSeen.Load()
		if n <= m || r.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if int(n) > r.slots {
		r.t.Errorf("%d sends in flight, slots %d", n, r.slots)
	}
	if len(items) == 0 {
		r.t.Errorf("empty send")
	}
	if len(items) > 1 && ctx.Err() != nil {
		r.t.Errorf("a batch of %d items sent with an ended context: %v", len(items), ctx.Err())
	}
	weight := 0
	for _, it := range items {
		weight += it.size
	}
	if len(items) > 1 && weight > r.max {
		r.t.Errorf("batch of %d items weighs %d > max %d", len(items), weight, r.max)
	}
	// A few yields so that queues form and leaders overlap.
	for range rand.IntN(4) {
		runtime.Gosched()
	}
	errs := make([]error, len(items))
	if err := ctx.Err(); err != nil {
		// Like a real client: an ended context fails the round trip before
		// anything is written, so nothing is sent.
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	r.mu.Lock()
	for i, it := range items {
		r.sent[it.id]++
		errs[i] = r.outcomes[it.id]
	}
	r.mu.Unlock()
	return errs
}

// checkQuiet checks the committer's books once no call is under way: no send
// in flight, the weight that of the queue, and only abandoned calls left in
// the queue.
func checkQuiet(t *testing.T, c *Committer[stressItem]) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight != 0 {
		t.Errorf("inFlight %d with no call under way", c.inFlight)
	}
	w := 0
	for _, p := range c.queue {
		w += c.size(p.item)
		if s := p.state.Load(); s != abandoned {
			t.Errorf("call %d left in the queue in state %d with no call under way", p.item.id, s)
		}
	}
	if w != c.weight {
		t.Errorf("weight %d, queue weighs %d (%d calls)", c.weight, w, len(c.queue))
	}
}

// TestStressRandomCancellation runs many callers with random sizes (some
// over max) and random cancellation through committers of 1 to 4 slots and
// extra 1 to 20, and checks that every call that was not abandoned gets
// exactly its own outcome, every item sent is sent once, an item whose call
// returned its context's error is never sent, and the books balance after.
func TestStressRandomCancellation(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	for cfg := range 12 {
		slots := 1 + rng.IntN(4)
		extra := 1 + rng.IntN(20)
		max := 1 + rng.IntN(12)
		callers := 8 + rng.IntN(40)
		perCaller := 10 + rng.IntN(20)
		name := fmt.Sprintf("%d/slots=%d,extra=%d,max=%d,callers=%d", cfg, slots, extra, max, callers)
		total := callers * perCaller
		r := &stressRecorder{t: t, slots: slots, max: max, outcomes: make([]error, total), sent: make([]int, total)}
		for id := range total {
			if id%3 == 0 {
				r.outcomes[id] = fmt.Errorf("outcome of %d", id)
			}
		}
		c := New(slots, extra, max, func(it stressItem) int { return it.size }, r.send)
		got := make([]error, total)
		var wg sync.WaitGroup
		for g := range callers {
			wg.Add(1)
			grng := rand.New(rand.NewPCG(seed, uint64(cfg*1000+g+2)))
			go func() {
				defer wg.Done()
				for k := range perCaller {
					id := g*perCaller + k
					it := stressItem{id: id, size: 1 + grng.IntN(max+3)} // some over max
					ctx := context.Background()
					var cancel context.CancelFunc = func() {}
					switch grng.IntN(4) {
					case 0: // cancelled before the call
						ctx, cancel = context.WithCancel(ctx)
						cancel()
					case 1: // cancelled at some point during the call
						var c2 context.CancelFunc
						ctx, c2 = context.WithCancel(ctx)
						yields := grng.IntN(20)
						go func() {
							for range yields {
								runtime.Gosched()
							}
							c2()
						}()
						cancel = c2
					}
					got[id] = c.Do(ctx, it)
					cancel()
				}
			}()
		}
		if !waitTimeout(&wg, 60*time.Second) {
			c.mu.Lock()
			t.Fatalf("%s: calls still blocked after 60s: inFlight %d, queue %d, weight %d", name, c.inFlight, len(c.queue), c.weight)
		}
		abandonedCalls, sentCalls := 0, 0
		for id := range total {
			err, n := got[id], r.sent[id]
			switch {
			case errors.Is(err, context.Canceled):
				abandonedCalls++
				if n != 0 {
					t.Errorf("%s: item %d sent %d times, yet its call returned %v", name, id, n, err)
				}
			case n != 1:
				t.Errorf("%s: item %d sent %d times, its call returned %v", name, id, n, err)
			case err != r.outcomes[id]:
				t.Errorf("%s: item %d: call returned %v, want its outcome %v", name, id, err, r.outcomes[id])
			default:
				sentCalls++
			}
		}
		checkQuiet(t, c)
		// A lone call after all that is sent at once and clears the queue.
		last := stressItem{id: 0, size: 1}
		r.outcomes[0] = nil
		r.mu.Lock()
		r.sent[0] = 0
		r.mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- c.Do(context.Background(), last) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: lone call after the run: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: lone call after the run never returned", name)
		}
		c.mu.Lock()
		if len(c.queue) != 0 || c.weight != 0 || c.inFlight != 0 {
			t.Errorf("%s: after a lone call: queue %d, weight %d, inFlight %d", name, len(c.queue), c.weight, c.inFlight)
		}
		c.mu.Unlock()
		t.Logf("%s: %d sent, %d abandoned, up to %d sends at once", name, sentCalls, abandonedCalls, r.maxSeen.Load())
	}
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestOversizedItemsAlone: items heavier than max go one per send, never
// with others, and every call returns, whatever slots and extra are.
func TestOversizedItemsAlone(t *testing.T) {
	t.Parallel()
	for slots := 1; slots <= 4; slots++ {
		for _, extra := range []int{1, 5, 20} {
			const max, callers = 4, 40
			var mu sync.Mutex
			var bad []string
			sent := 0
			c := New(slots, extra, max, func(n int) int { return n }, func(ctx context.Context, items []int) []error {
				mu.Lock()
				defer mu.Unlock()
				sum := 0
				for _, n := range items {
					sum += n
				}
				if len(items) > 1 && sum > max {
					bad = append(bad, fmt.Sprint(items))
				}
				sent += len(items)
				runtime.Gosched()
				return make([]error, len(items))
			})
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := c.Do(context.Background(), 1+i%(2*max)); err != nil {
						t.Error(err)
					}
				}()
			}
			if !waitTimeout(&wg, 30*time.Second) {
				t.Fatalf("slots %d extra %d: calls blocked", slots, extra)
			}
			if len(bad) > 0 || sent != callers {
				t.Errorf("slots %d extra %d: over-max batches %v; sent %d of %d", slots, extra, bad, sent, callers)
			}
		}
	}
}

// TestAbandonedWeightDoesNotStrand: abandoned calls keep their weight in
// the books until a leader passes them; they must neither strand a later
// call nor be sent.
func TestAbandonedWeightDoesNotStrand(t *testing.T) {
	t.Parallel()
	h := newHeldSends()
	release := h.release
	c := New(2, 5, 100, nil, h.send)
	first := make(chan error, 1)
	go func() { first <- c.Do(context.Background(), 0) }() // holds a send
	for inFlight(c) == 0 {
		runtime.Gosched()
	}
	// Four calls wait (under extra 5) and give up.
	for i := 1; i <= 4; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- c.Do(ctx, 100+i) }()
		for queued(c) < i {
			runtime.Gosched()
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned call %d returned %v", i, err)
		}
	}
	// A fifth call makes the books weigh 5 (4 abandoned).
	fifth := make(chan error, 1)
	go func() { fifth <- c.Do(context.Background(), 5) }()
	// Either the fifth call leads a send beside the held one (the books
	// count the abandoned weight) and returns, or it waits for the held
	// send; then releasing that send must bring its outcome.
	var fifthErr error
	returned := false
	deadline := time.Now().Add(10 * time.Second)
	for !returned {
		select {
		case fifthErr = <-fifth:
			returned = true
			continue
		default:
		}
		c.mu.Lock()
		waits := len(c.queue) == 5 && c.queue[4].state.Load() == waiting && c.inFlight == 1
		c.mu.Unlock()
		if waits {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fifth call neither returned nor waited")
		}
		runtime.Gosched()
	}
	t.Logf("fifth call returned before the held send was released: %v", returned)
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !returned {
		select {
		case fifthErr = <-fifth:
		case <-time.After(10 * time.Second):
			t.Fatal("the fifth call never returned")
		}
	}
	if fifthErr != nil {
		t.Fatal(fifthErr)
	}
	c.mu.Lock()
	if c.weight != 0 || len(c.queue) != 0 || c.inFlight != 0 {
		t.Errorf("after all: weight %d, queue %d, inFlight %d; want 0, 0, 0", c.weight, len(c.queue), c.inFlight)
	}
	c.mu.Unlock()
	sends := h.snapshot()
	for _, s := range sends {
		for _, x := range s {
			if x >= 100 {
				t.Errorf("abandoned item %d sent (sends %v)", x, sends)
			}
		}
	}
}

// TestLeaderSendsItsOwnItemFirst: a caller that leads a send carries its
// own item in it, ahead of the waiting calls, so its Do never waits behind
// other callers' batches (and a leader's context cannot end while its own
// item waits).
func TestLeaderSendsItsOwnItemFirst(t *testing.T) {
	t.Parallel()
	h := newHeldSends()
	// slots 2, extra 3, max 2: a second send needs 3 waiting.
	c := New(2, 3, 2, nil, h.send)
	var wg sync.WaitGroup
	do := func(i int) { goDo(t, &wg, c, i) }
	do(0) // send A, held
	for inFlight(c) < 1 {
		runtime.Gosched()
	}
	do(1)
	for queued(c) < 1 {
		runtime.Gosched()
	}
	do(2)
	for queued(c) < 2 {
		runtime.Gosched()
	}
	do(7) // weight 3: leads a second send beside A
	for len(h.snapshot()) < 1 {
		runtime.Gosched()
	}
	close(h.release)
	if !waitTimeout(&wg, 10*time.Second) {
		t.Fatal("calls blocked")
	}
	sends := h.snapshot()
	if len(sends[0]) != 2 || sends[0][0] != 7 || sends[0][1] != 1 {
		t.Fatalf("the leader's send carried %v, want [7 1]: its own item, then the oldest waiting", sends[0])
	}
	seen := map[int]int{}
	for _, s := range sends {
		for _, x := range s {
			seen[x]++
		}
	}
	for _, x := range []int{0, 1, 2, 7} {
		if seen[x] != 1 {
			t.Fatalf("sends %v: item %d sent %d times, want once", sends, x, seen[x])
		}
	}
}

// TestLeaderHandsOver: while callers keep arriving one per send (well under
// extra), the first caller returns once its own send is done: it hands the
// next send to a waiting caller instead of sending for others.
func TestLeaderHandsOver(t *testing.T) {
	t.Parallel()
	const more = 200
	var c *Committer[int]
	var wg sync.WaitGroup
	var sends atomic.Int32
	c = New(8, 16, 100, nil, func(ctx context.Context, items []int) []error {
		// One more caller arrives during each send, for the first `more`.
		if n := sends.Add(1); n <= more {
			q := queued(c)
			wg.Add(1)
			go func() { defer wg.Done(); _ = c.Do(context.Background(), int(n)) }()
			for queued(c) == q {
				runtime.Gosched()
			}
		}
		return make([]error, len(items))
	})
	var returnedAfter atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = c.Do(context.Background(), 0)
		returnedAfter.Store(sends.Load())
	}()
	if !waitTimeout(&wg, 30*time.Second) {
		t.Fatal("calls blocked")
	}
	if n := returnedAfter.Load(); n > 2 {
		t.Fatalf("the first caller's Do returned after %d sends; want it back after its own (the next may have started)", n)
	}
	if n := sends.Load(); n < more {
		t.Fatalf("%d sends, want at least %d", n, more)
	}
}
