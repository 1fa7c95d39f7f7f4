package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// Client returns the Redis client the suite inspects keys with. A driver
// under test must store its keys on the same server, so build it on this
// client (or on one made from the same CONVEYOR_TEST_REDIS_URL).
func Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	return redistest.Client(t)
}

// Context returns a context that ends after d or when t ends, whichever is
// first: every wait in a test has a deadline.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// NewMessage returns a valid message for queue with an ID unique within the
// queue (<queue>-<i>, zero-padded so IDs sort in i order) and a payload that
// names i.
func NewMessage(queue string, i int) *broker.Message {
	return &broker.Message{
		ID:         fmt.Sprintf("%s-%06d", queue, i),
		Kind:       "brokertest",
		Queue:      queue,
		Payload:    fmt.Appendf(nil, "payload %d", i),
		EnqueuedAt: time.Now(),
	}
}

// Enqueue enqueues msgs in one call and fails t on error.
func Enqueue(t testing.TB, d broker.Driver, msgs ...*broker.Message) {
	t.Helper()
	if err := d.Enqueue(Context(t, 30*time.Second), msgs); err != nil {
		t.Fatalf("Enqueue of %d messages: %v", len(msgs), err)
	}
}

// Open opens a consumer of queue and closes it when t ends. Consumers that
// receive fan-out messages must be open before the messages are enqueued, so
// the suite always opens first.
func Open(t testing.TB, d broker.Driver, queue string, opts *broker.ConsumerOptions) broker.Consumer {
	t.Helper()
	c, err := d.Open(Context(t, 30*time.Second), queue, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", queue, err)
	}
	if c == nil {
		t.Fatalf("Open(%q) returned a nil consumer and no error", queue)
	}
	t.Cleanup(func() {
		// A test may have closed it already; a second Close's error means
		// nothing here.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// Fetch calls c.Fetch with a deadline of wait and fails t unless it returns
// between 1 and max deliveries and no error.
func Fetch(t testing.TB, c broker.Consumer, max int, wait time.Duration) []*broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ds, err := c.Fetch(ctx, max)
	if err != nil {
		t.Fatalf("Fetch(max=%d) within %v: %v (and %d deliveries)", max, wait, err, len(ds))
	}
	if len(ds) < 1 || len(ds) > max {
		t.Fatalf("Fetch(max=%d) returned %d deliveries, want 1 to %d", max, len(ds), max)
	}
	for i, d := range ds {
		if d == nil {
			t.Fatalf("Fetch returned a nil delivery at %d", i)
		}
	}
	return ds
}

// FetchOne fetches exactly one delivery within wait.
func FetchOne(t testing.TB, c broker.Consumer, wait time.Duration) *broker.Delivery {
	t.Helper()
	return Fetch(t, c, 1, wait)[0]
}

// FetchN fetches until it holds n deliveries, max at a time, each Fetch
// waiting at most wait. It fails t if a Fetch errs or returns more than it
// was asked for.
func FetchN(t testing.TB, c broker.Consumer, n, max int, wait time.Duration) []*broker.Delivery {
	t.Helper()
	var out []*broker.Delivery
	for len(out) < n {
		ask := min(max, n-len(out))
		out = append(out, Fetch(t, c, ask, wait)...)
	}
	return out
}

// ExpectNone fails t if c delivers anything within wait. The Fetch must end
// with the context's deadline error.
func ExpectNone(t testing.TB, c broker.Consumer, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	ds, err := c.Fetch(ctx, 100)
	took := time.Since(start)
	if len(ds) > 0 {
		ids := make([]string, len(ds))
		for i, d := range ds {
			ids[i] = d.ID
		}
		t.Fatalf("Fetch delivered %v, want nothing within %v", ids, wait)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch on an empty queue ended with %v, want context.DeadlineExceeded", err)
	}
	if took > wait+cancelBound {
		t.Fatalf("Fetch with a %v deadline returned after %v, want within %v of the deadline", wait, took, cancelBound)
	}
}

// AssertNoKeys fails t if any key under prefix exists.
func AssertNoKeys(t testing.TB, prefix string) {
	t.Helper()
	if ks := redistest.Keys(t, Client(t), prefix); len(ks) > 0 {
		t.Fatalf("keys left under %s: %q", prefix, ks)
	}
}

// IDs returns the IDs of ds in order.
func IDs(ds []*broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// batchErrors returns the errors a batch settle aggregated: the members of a
// *multierror.Error or of an errors.Join, else err alone.
func batchErrors(err error) []error {
	switch e := err.(type) {
	case nil:
		return nil
	case interface{ WrappedErrors() []error }:
		return e.WrappedErrors()
	case interface{ Unwrap() []error }:
		return e.Unwrap()
	}
	return []error{err}
}

// checkLeaseLost fails t unless err says d's lease was lost. When batch is
// true err must come from a batch method: one *broker.DeliveryError naming d.
func checkLeaseLost(t testing.TB, op string, err error, d *broker.Delivery, batch bool) {
	t.Helper()
	if !errors.Is(err, broker.ErrLeaseLost) {
		t.Errorf("%s of a stale delivery: got %v, want broker.ErrLeaseLost", op, err)
		return
	}
	if !batch {
		return
	}
	var de *broker.DeliveryError
	if !errors.As(err, &de) {
		t.Errorf("%s of a stale delivery: %v is not a *broker.DeliveryError", op, err)
		return
	}
	if de.Delivery != d {
		t.Errorf("%s: DeliveryError names delivery %p, want the one settled (%p, %s)", op, de.Delivery, d, d.ID)
	}
}

// Partitioned is implemented by a driver that splits a queue into
// partitions, each stored as a queue of its own (broker/shard): where the
// suite reads or writes a queue's keys itself, it does so in each
// partition (writes: in the first).
type Partitioned interface {
	// Partitions returns the names of queue's partitions: queue itself
	// when it is whole.
	Partitions(queue string) []string
}

// partitions returns the queues that hold queue's keys in d.
func partitions(d broker.Driver, queue string) []string {
	if p, ok := d.(Partitioned); ok {
		return p.Partitions(queue)
	}
	return []string{queue}
}

// split reports whether d keeps queue in more than one partition. Each
// partition keeps its own order and its own bounds: the suite then checks
// orders across the queue as sets, and leaves out what only one whole
// queue promises (see broker/shard).
func split(d broker.Driver, queue string) bool { return len(partitions(d, queue)) > 1 }

// inOrder reports whether got equals want: in order, or as sets when queue
// is split.
func inOrder(e *env, queue string, got, want []string) bool {
	if !split(e.d, queue) {
		return slices.Equal(got, want)
	}
	return slices.Equal(sortedIDs(got), sortedIDs(want))
}
