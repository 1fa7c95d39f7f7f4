package list

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/script"
)

const (
	// maxLostFetches bounds the tokens a consumer keeps of fetches it could
	// not hand back yet; past it the oldest are forgotten, and their
	// batches come back when their leases run out, as after a crash.
	maxLostFetches = 64
	// handBackScan is the COUNT of one HSCAN step over the inflight HASH.
	handBackScan = 1000
	// maxHandBackSteps bounds the HSCAN steps of one hand-back: far beyond
	// any real number of messages in flight.
	maxHandBackSteps = 1 << 16
)

// lostFetches holds the tokens of fetches whose reply was lost.
type lostFetches struct {
	n    atomic.Int32 // len(toks), read without the lock on every fetch
	mu   sync.Mutex
	toks []string
}

func (l *lostFetches) add(toks ...string) {
	l.mu.Lock()
	l.toks = append(l.toks, toks...)
	if over := len(l.toks) - maxLostFetches; over > 0 {
		l.toks = slices.Delete(l.toks, 0, over)
	}
	l.n.Store(int32(len(l.toks)))
	l.mu.Unlock()
}

func (l *lostFetches) take() []string {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	toks := l.toks
	l.toks = nil
	l.n.Store(0)
	l.mu.Unlock()
	return toks
}

// lostFetch deals with a fetch whose outcome is unknown (its reply was
// lost, or its deadline passed, after Redis may have run it): the batch it
// may have leased is nobody's, and left alone it would come back only when
// its leases ran out, each counting a recovery, as if a worker had died
// running it (three such losses and a healthy job is poison). The consumer
// knows the fetch's token, so it hands that batch back to the front of
// ready with no recovery counted: now, or before its next fetch
// (or at Close) while Redis cannot be reached.
func (c *consumer) lostFetch(ctx context.Context, tok string) {
	c.lost.add(tok)
	c.handBackLost(ctx)
}

// handBackLost hands back the batches of the lost fetches; a token whose
// hand-back fails is kept for the next try.
func (c *consumer) handBackLost(ctx context.Context) {
	toks := c.lost.take()
	var keep []string
	for _, tok := range toks {
		n, err := c.handBack(ctx, tok)
		if err != nil {
			keep = append(keep, tok)
			c.d.log.WarnContext(ctx, "list: hand-back of a fetch whose outcome was lost (its reply lost, or its script failed) failed; will try again",
				"queue", c.queue, "error", err.Error())
			continue
		}
		if n > 0 {
			c.d.log.InfoContext(ctx, "list: handed back the batch of a fetch whose outcome was lost (its reply lost, or its script failed)",
				"queue", c.queue, "count", n)
		}
	}
	if len(keep) > 0 {
		c.lost.add(keep...)
	}
}

// handBack finds the receipts of the fetch with token tok in the inflight
// HASH (HSCAN ... MATCH "<tok>[,.]*": O(messages in flight) in steps of
// handBackScan, which only a lost reply pays) and releases them (Release),
// in the order the fetch leased them when their receipts name their
// places, else in receipt order (by ID, as a reclaim orders a batch):
// fenced, so a lease that ran out and was reclaimed meanwhile is left
// alone. It returns how many it handed back.
func (c *consumer) handBack(ctx context.Context, tok string) (int, error) {
	var receipts []string
	cursor := uint64(0)
	for step := 0; ; step++ {
		if step == maxHandBackSteps {
			return 0, fmt.Errorf("inflight HASH not scanned in %d steps", maxHandBackSteps)
		}
		kv, next, err := c.d.client.HScan(ctx, c.k.inflight, cursor, tok+"[,.]*", handBackScan).Result()
		if err != nil {
			return 0, err
		}
		for i := 0; i < len(kv); i += 2 {
			receipts = append(receipts, kv[i])
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	place := func(r string) int { // k of "<tok>.<k>,...", 0 for "<tok>,..."
		n, _ := strconv.Atoi(strings.TrimPrefix(receiptToken(r)[len(tok):], "."))
		return n
	}
	slices.SortFunc(receipts, func(a, b string) int {
		if c := place(a) - place(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	receipts = slices.Compact(receipts) // HSCAN may return a field twice
	ds := make([]*broker.Delivery, len(receipts))
	for i, r := range receipts {
		ds[i] = &broker.Delivery{Receipt: r, Token: receiptToken(r)}
		ds[i].Queue = c.queue
	}
	// Release keeps the order and fences each lease; a lease reclaimed
	// meanwhile is not this consumer's to hand back, any other failure is
	// tried again.
	return script.HandedBack(len(ds), c.Release(ctx, ds...))
}
