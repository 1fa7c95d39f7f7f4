package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
)

// keeps: the driver elects one keeper per queue (Capabilities.Keep).
func keeps(c broker.Capabilities) bool { return c.Keep && c.AtLeastOnce }

// keptOpts are the options of a consumer whose queue has a keeper.
func keptOpts(vt time.Duration) *broker.ConsumerOptions {
	return &broker.ConsumerOptions{VisibilityTimeout: vt, Kept: true}
}

// keeperOf returns the driver's Keeper and Upkeeper, failing t when it has
// Capabilities.Keep without them.
func keeperOf(t *testing.T, d broker.Driver) (broker.Keeper, broker.Upkeeper) {
	t.Helper()
	k, ok1 := d.(broker.Keeper)
	u, ok2 := d.(broker.Upkeeper)
	if !ok1 || !ok2 {
		t.Fatalf("driver %T has Capabilities.Keep but does not implement broker.Keeper and broker.Upkeeper", d)
	}
	return k, u
}

// Ack acks ds on c and fails t on error.
func Ack(t testing.TB, c broker.Consumer, ds ...*broker.Delivery) {
	t.Helper()
	if err := c.Ack(Context(t, 30*time.Second), ds...); err != nil {
		t.Fatalf("Ack of %v: %v", IDs(ds), err)
	}
}

// testKeptConsumersWake: kept consumers sleep while the queue is empty and
// wake for every way a message reaches it: an enqueue, a release by
// another consumer, a retry due now and a promoted timer. No keeper runs:
// a store wakes a sleeping consumer on its own.
func testKeptConsumersWake(t *testing.T, e *env) {
	keeperOf(t, e.d)
	sleeper := Open(t, e.d, "q", keptOpts(time.Minute))
	other := Open(t, e.d, "q", keptOpts(time.Minute))
	// fetchAsleep starts a Fetch on the sleeper and returns its outcome.
	fetchAsleep := func() <-chan []*broker.Delivery {
		out := make(chan []*broker.Delivery, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ds, _ := sleeper.Fetch(ctx, 10)
			out <- ds
		}()
		return out
	}
	expect := func(what string, ch <-chan []*broker.Delivery, id string) *broker.Delivery {
		t.Helper()
		select {
		case ds := <-ch:
			if len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("%s: the sleeping consumer fetched %v, want [%s]", what, IDs(ds), id)
			}
			return ds[0]
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the sleeping consumer got nothing within 10s", what)
		}
		return nil
	}
	ctx := Context(t, time.Minute)

	ch := fetchAsleep()
	m := NewMessage("q", 1)
	Enqueue(t, e.d, m)
	d := expect("enqueue", ch, m.ID)
	Ack(t, sleeper, d)

	// A release by another consumer.
	m2 := NewMessage("q", 2)
	Enqueue(t, e.d, m2)
	d2 := FetchOne(t, other, 10*time.Second)
	ch = fetchAsleep()
	if err := other.Release(ctx, d2); err != nil {
		t.Fatal(err)
	}
	d2 = expect("release", ch, m2.ID)

	// A retry due now.
	ch = fetchAsleep()
	if err := sleeper.Retry(ctx, d2, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d2 = expect("retry", ch, m2.ID)
	Ack(t, sleeper, d2)

	// A timer, promoted.
	if e.caps.Delay {
		tm, ok := e.d.(broker.Timers)
		if !ok {
			t.Fatalf("driver %T has Capabilities.Delay but no broker.Timers", e.d)
		}
		ch = fetchAsleep()
		m3 := NewMessage("q", 3)
		m3.RunAt = time.Now().Add(50 * time.Millisecond)
		Enqueue(t, e.d, m3)
		deadline := time.Now().Add(10 * time.Second)
		for {
			p, err := tm.Promote(ctx, "q", 10)
			if err != nil {
				t.Fatal(err)
			}
			if p.Promoted == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the timer was not promoted within 10s")
			}
			time.Sleep(max(p.Next, time.Millisecond)) // the driver says when it is due
		}
		Ack(t, sleeper, expect("promotion", ch, m3.ID))
	}
}

// testKeptRecovery: a delivery whose lease runs out reaches a kept
// consumer sleeping on the empty queue once the keeper runs Upkeep, with
// its recovery counted.
func testKeptRecovery(t *testing.T, e *env) {
	_, u := keeperOf(t, e.d)
	// The lease is also the time the test has to ack the recovered
	// delivery before its own Upkeep calls reclaim it: 300 ms ran out on a
	// loaded cluster in CI.
	const vt = time.Second
	dead := Open(t, e.d, "q", keptOpts(vt))
	sleeper := Open(t, e.d, "q", keptOpts(vt))
	m := NewMessage("q", 1)
	Enqueue(t, e.d, m)
	FetchOne(t, dead, 10*time.Second) // and never settled: its worker died

	got := make(chan []*broker.Delivery, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		ds, _ := sleeper.Fetch(ctx, 10)
		got <- ds
	}()
	ctx := Context(t, time.Minute)
	deadline := time.Now().Add(15 * time.Second)
	for {
		next, err := u.Upkeep(ctx, "q")
		if err != nil {
			t.Fatalf("Upkeep: %v", err)
		}
		if next <= 0 || next > broker.UpkeepEvery {
			t.Fatalf("Upkeep asked to run again in %v, want within (0, %v]", next, broker.UpkeepEvery)
		}
		select {
		case ds := <-got:
			if len(ds) != 1 || ds[0].ID != m.ID || ds[0].Recoveries != 1 {
				t.Fatalf("the sleeping consumer fetched %v (recoveries %v), want [%s] with 1", IDs(ds), recoveries(ds), m.ID)
			}
			Ack(t, sleeper, ds[0])
			return
		case <-time.After(min(next, 100*time.Millisecond)):
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired lease did not reach the sleeping consumer within 15s of Upkeep calls")
		}
	}
}

func recoveries(ds []*broker.Delivery) []int {
	out := make([]int, len(ds))
	for i, d := range ds {
		out[i] = d.Recoveries
	}
	return out
}

// testKeeperElection: of three candidates one leads at a time; when it
// resigns another leads within a second or so.
func testKeeperElection(t *testing.T, e *env) {
	k, _ := keeperOf(t, e.d)
	type lead struct {
		id    string
		start time.Time
	}
	leads := make(chan lead, 16)
	stops := map[string]context.CancelFunc{}
	done := map[string]chan struct{}{}
	for _, id := range []string{"a", "b", "c"} {
		ctx, cancel := context.WithCancel(context.Background())
		ended := make(chan struct{})
		stops[id], done[id] = cancel, ended
		go func() {
			defer close(ended)
			_ = k.Campaign(ctx, "q", id, func(ctx context.Context) {
				leads <- lead{id, time.Now()}
				<-ctx.Done()
			})
		}()
	}
	t.Cleanup(func() {
		for id, stop := range stops {
			stop()
			<-done[id]
		}
	})
	next := func() lead {
		t.Helper()
		select {
		case l := <-leads:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no candidate led within 10s")
		}
		return lead{}
	}
	first := next()
	stopped := time.Now()
	stops[first.id]()
	<-done[first.id]
	second := next()
	if second.id == first.id {
		t.Fatalf("%s led again after it resigned", first.id)
	}
	t.Logf("%s led %v after %s resigned", second.id, second.start.Sub(stopped), first.id)
	if d := second.start.Sub(stopped); d > 2*time.Second {
		t.Errorf("the next keeper led %v after the first resigned, want within about a second", d)
	}
	select {
	case l := <-leads:
		t.Errorf("%s started leading too, while %s leads", l.id, second.id)
	default:
	}
}
