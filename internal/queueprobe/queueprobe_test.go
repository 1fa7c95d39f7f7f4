package queueprobe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestProbe tells each queue's driver from its keys and refuses what
// they cannot settle.
func TestProbe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	store := func(driver, queue string, delay time.Duration) {
		t.Helper()
		dt, _ := drivertest.Named(driver)
		m := &broker.Message{ID: queue + "-" + driver, Kind: "k", Queue: queue, EnqueuedAt: time.Now()}
		if delay > 0 {
			m.RunAt = m.EnqueuedAt.Add(delay)
		}
		if err := dt.Must(t, rdb, prefix).Enqueue(ctx, []*broker.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	store("list", "l", 0)
	store("stream", "s", 0)
	store("list", "timers", time.Hour)
	store("list", "mixed", 0)
	store("stream", "mixed", 0)

	s, err := New(rdb, &Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := s.Probe(ctx, "l", "s", "timers", "nosuch")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range []Queue{{Name: "l", Driver: "list", Known: true}, {Name: "s", Driver: "stream", Known: true}, {Name: "timers", Known: true}, {Name: "nosuch"}} {
		if qs[k] != want {
			t.Errorf("Probe %s = %+v, want %+v", want.Name, qs[k], want)
		}
	}
	if _, err := s.Probe(ctx, "mixed"); !errors.Is(err, ErrDriver) {
		t.Errorf("Probe of a queue with keys of both drivers: %v, want ErrDriver", err)
	}
	if d, err := s.DriverOf(qs[2], false); err != nil || d != "list" {
		t.Errorf("DriverOf a timers-only queue, to read: %q, %v; want list", d, err)
	}
	if _, err := s.DriverOf(qs[2], true); !errors.Is(err, ErrDriver) {
		t.Errorf("DriverOf a timers-only queue, to write: %v, want ErrDriver", err)
	}
	if _, _, err := s.Open(ctx, "nosuch", false, false); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("Open of an unknown queue: %v, want ErrUnknownQueue", err)
	}
	if insp, q, err := s.Open(ctx, "nosuch", true, true); !errors.Is(err, ErrDriver) || insp != nil || q.Known {
		t.Errorf("Open of a new queue to write: %v, want ErrDriver", err)
	}

	forced, err := New(rdb, &Config{Prefix: prefix, Driver: "stream"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := forced.Open(ctx, "l", false, false); !errors.Is(err, ErrDriver) {
		t.Errorf("Open of a list queue as stream: %v, want ErrDriver", err)
	}
	if insp, q, err := forced.Open(ctx, "timers", true, false); err != nil || q.Driver != "stream" || insp != forced.Inspector("stream") {
		t.Errorf("Open of a timers-only queue as stream: %+v, %v", q, err)
	}
	if _, err := New(rdb, &Config{Driver: "pubsub"}); err == nil {
		t.Error("New with driver pubsub did not fail")
	}
}
