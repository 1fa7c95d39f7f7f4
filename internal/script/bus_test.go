package script_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// busClient returns a client of its own with a log of its round trips,
// and a key in one slot for the test.
func busClient(t *testing.T) (redis.UniversalClient, *drivertest.CmdLog, string) {
	t.Helper()
	rdb := redistest.NewClient(t)
	log := &drivertest.CmdLog{}
	rdb.AddHook(log)
	return rdb, log, redistest.Prefix(t) + ":{bus}:n"
}

// sizes returns the number of commands in each round trip logged.
func sizes(log *drivertest.CmdLog) []int {
	var out []int
	for _, trip := range log.Take() {
		out = append(out, len(trip))
	}
	return out
}

// waitRiders waits until n commands wait on b, failing t after 5 s.
func waitRiders(t *testing.T, b *script.Bus, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for script.BusWaiting(b) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d commands wait on the bus, want %d", script.BusWaiting(b), n)
		}
		runtime.Gosched()
	}
}

// TestBusCarriesCommandsInTheDrivingRoundTrip: commands waiting on the bus
// go in the next driving command's round trip, each with its own reply.
func TestBusCarriesCommandsInTheDrivingRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, trips, key := busClient(t)
	b := script.NewBus(rdb)

	var wg sync.WaitGroup
	riders := make([]*redis.IntCmd, 2)
	errs := make([]error, 2)
	for i := range riders {
		riders[i] = redis.NewIntCmd(ctx, "incrby", key, 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = script.Send(ctx, b.Carry(time.Minute), riders[i])
		}()
	}
	waitRiders(t, b, 2)
	drive := redis.NewStringCmd(ctx, "get", key)
	if err := script.Send(ctx, b.Drive(), drive); err != nil {
		t.Fatalf("driving GET: %v", err)
	}
	wg.Wait()
	for i := range riders {
		if errs[i] != nil {
			t.Fatalf("rider %d: %v", i, errs[i])
		}
	}
	if a, c := riders[0].Val(), riders[1].Val(); a+c != 30 || (a != 10 && c != 10) {
		t.Errorf("the riders' INCRBY replied %d and %d, want 10 and 20", a, c)
	}
	if drive.Val() != "20" {
		t.Errorf("the driving GET replied %q, want 20: it goes after the riders", drive.Val())
	}
	if got := sizes(trips); len(got) != 1 || got[0] != 3 {
		t.Errorf("round trips (commands in each) = %v, want [3]", got)
	}
}

// TestBusRiderGoesAloneAfterItsWait: with no driving command, a command
// goes alone once its wait is over.
func TestBusRiderGoesAloneAfterItsWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, trips, key := busClient(t)
	b := script.NewBus(rdb)
	cmd := redis.NewIntCmd(ctx, "incr", key)
	start := time.Now()
	if err := script.Send(ctx, b.Carry(20*time.Millisecond), cmd); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("the command went after %v, before its wait of 20ms", waited)
	}
	if cmd.Val() != 1 {
		t.Errorf("INCR replied %d, want 1", cmd.Val())
	}
	if got := sizes(trips); len(got) != 1 || got[0] != 1 {
		t.Errorf("round trips (commands in each) = %v, want [1]", got)
	}
	if script.BusWaiting(b) != 0 {
		t.Errorf("%d commands still wait on the bus", script.BusWaiting(b))
	}
	// With no wait, Carry sends at once.
	cmd = redis.NewIntCmd(ctx, "incr", key)
	if err := script.Send(ctx, b.Carry(0), cmd); err != nil || cmd.Val() != 2 {
		t.Errorf("Carry(0): INCR = %d, %v; want 2, nil", cmd.Val(), err)
	}
}

// TestBusRiderWhoseContextEndsIsNotSent: a command whose context ends while
// it waits is never sent, and a later driving command goes alone.
func TestBusRiderWhoseContextEndsIsNotSent(t *testing.T) {
	t.Parallel()
	rdb, trips, key := busClient(t)
	b := script.NewBus(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cmd := redis.NewIntCmd(ctx, "incr", key)
	go func() { done <- script.Send(ctx, b.Carry(time.Minute), cmd) }()
	waitRiders(t, b, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send = %v, want context.Canceled", err)
	}
	get := redis.NewStringCmd(context.Background(), "get", key)
	if err := script.Send(context.Background(), b.Drive(), get); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after the cancelled INCR = %q, %v; want redis.Nil (never sent)", get.Val(), err)
	}
	if got := sizes(trips); len(got) != 1 || got[0] != 1 {
		t.Errorf("round trips (commands in each) = %v, want [1]: only the GET", got)
	}
}

// TestBusRoundTripFailureReachesEveryCommand: when the driving round trip
// fails, each command in it gets the error, none a success.
func TestBusRoundTripFailureReachesEveryCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	key := "bus:n"
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	b := script.NewBus(rdb)
	rider := redis.NewIntCmd(ctx, "incr", key)
	done := make(chan error, 1)
	go func() { done <- script.Send(ctx, b.Carry(time.Minute), rider) }()
	waitRiders(t, b, 1)
	proxy.DropNextReply()
	drive := redis.NewStringCmd(ctx, "get", key)
	driveErr := script.Send(ctx, b.Drive(), drive)
	riderErr := <-done
	var ne net.Error
	for name, e := range map[string]error{"driving GET": driveErr, "rider INCR": riderErr} {
		if e == nil || errors.Is(e, redis.Nil) {
			t.Errorf("%s: %v, want the round trip's error", name, e)
		}
		if !script.Unsure(e) && !errors.As(e, &ne) {
			t.Errorf("%s: %v is not an unknown outcome", name, e)
		}
	}
}

// TestBusRide: a command waits for a ride only while the driving commands'
// callers say another comes soon and they come within MaxRide, and then
// for twice their mean gap.
func TestBusRide(t *testing.T) {
	t.Parallel()
	b := script.NewBus(redistest.Client(t))
	now := time.Unix(1000, 0)
	script.SetBusClock(b, func() time.Time { return now })
	if w := b.Ride(1); w != 0 {
		t.Fatalf("Ride before any drive = %v, want 0", w)
	}
	b.Drove(true)
	if w := b.Ride(1); w != 0 {
		t.Fatalf("Ride after one full drive = %v, want 0 (no gap known)", w)
	}
	now = now.Add(time.Millisecond)
	b.Drove(true)
	if w := b.Ride(1); w != 2*time.Millisecond {
		t.Fatalf("Ride after drives 1ms apart = %v, want 2ms", w)
	}
	now = now.Add(3 * time.Millisecond)
	b.Drove(true)
	if w := b.Ride(1); w != 3*time.Millisecond { // mean 1.5ms
		t.Fatalf("Ride after gaps of 1ms and 3ms = %v, want 3ms", w)
	}
	now = now.Add(time.Millisecond)
	b.Drove(false)
	if w := b.Ride(1); w != 0 {
		t.Fatalf("Ride after a drive that said none comes soon = %v, want 0", w)
	}
	b.Drove(true)
	now = now.Add(time.Second)
	b.Drove(true)
	if w := b.Ride(1); w != 0 {
		t.Fatalf("Ride after drives a second apart = %v, want 0 (over MaxRide)", w)
	}
}
