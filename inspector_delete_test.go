package conveyor_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/worker"
)

// TestInspectorDeleteQueue deletes a queue a worker pool is running on, on
// each durable driver: without Force the delete is refused while the
// pool's handler holds a job, and changes nothing; with Force it deletes
// every state and the registry entry, the pool's handler of the job it
// took from flight has its context cancelled (its lease is gone), and the
// pool goes on: a job enqueued afterwards runs, and the queue is listed
// again.
func TestInspectorDeleteQueue(t *testing.T) {
	t.Parallel()
	for _, dt := range drivertest.Durable {
		t.Run(dt.Name, func(t *testing.T) {
			t.Parallel()
			testInspectorDeleteQueue(t, newInspectEnv(t, dt))
		})
	}
}

func testInspectorDeleteQueue(t *testing.T, e *inspectEnv) {
	const q = "work"
	started := make(chan string, 16)
	cancelled := make(chan string, 16)
	h := conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
		started <- job.ID
		if job.Kind != "hold" {
			return nil
		}
		<-ctx.Done()
		cancelled <- job.ID
		return ctx.Err()
	})
	p, err := worker.NewPool(e.d, h, &worker.Config{Queue: q, Concurrency: 2, VisibilityTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stop := drivertest.Background(t, p.Run)
	defer stop()
	await := func(ch <-chan string, want string) {
		t.Helper()
		select {
		case id := <-ch:
			if id != want {
				t.Fatalf("got job %s, want %s", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("job %s did not come within 10s", want)
		}
	}

	// A timer, and a job in flight.
	e.enqueue("later", "t1", &conveyor.EnqueueOptions{Delay: time.Hour})
	e.enqueue("hold", "h1", nil)
	await(started, "h1")
	e.wantSizes("before", e.sizes(q), 0, 1, 1, 0, 0, 0)

	_, err = e.insp.DeleteQueue(e.ctx, q, nil)
	var ife *conveyor.InFlightError
	if !errors.Is(err, conveyor.ErrJobsInFlight) || !errors.As(err, &ife) || ife.InFlight != 1 || ife.Queue != q {
		t.Fatalf("DeleteQueue without Force while h1 runs: %v, want an *InFlightError of 1 job", err)
	}
	if !strings.Contains(err.Error(), "force") {
		t.Errorf("the refusal does not say how to go ahead: %v", err)
	}
	e.wantSizes("after a refused delete", e.sizes(q), 0, 1, 1, 0, 0, 0)

	res, err := e.insp.DeleteQueue(e.ctx, q, &conveyor.DeleteQueueOptions{Force: true})
	if err != nil {
		t.Fatalf("DeleteQueue with Force: %v", err)
	}
	if res.Queue != q || res.InFlight != 1 || res.Delayed != 1 || res.Ready != 0 || res.Discarded != 0 || !res.Registered || res.Keys < 3 {
		t.Errorf("DeleteQueue with Force = %+v, want 1 in flight, 1 delayed, registered, its keys", res)
	}
	if qs, err := e.insp.Queues(e.ctx); err != nil || slices.Contains(qs, q) {
		t.Errorf("Queues after the delete = %q, %v; want %q gone", qs, err, q)
	}
	e.wantSizes("after the delete", e.sizes(q), 0, 0, 0, 0, 0, 0)
	await(cancelled, "h1") // its lease is gone: the pool's next heartbeat learns it

	e.enqueue("quick", "q2", nil)
	await(started, "q2")
	if qs, err := e.insp.Queues(e.ctx); err != nil || !slices.Contains(qs, q) {
		t.Errorf("Queues after an enqueue to the deleted queue = %q, %v; want it listed again", qs, err)
	}
}

// TestInspectorDeleteQueueRefusals: hostile queue names are refused before
// any I/O, and a driver that cannot delete queues says so.
func TestInspectorDeleteQueueRefusals(t *testing.T) {
	t.Parallel()
	e := newInspectEnv(t, drivertest.Durable[0])
	for _, q := range []string{"", "a{b", "a b", "a\nb", strings.Repeat("q", 129)} {
		var qe *broker.QueueNameError
		if _, err := e.insp.DeleteQueue(e.ctx, q, nil); !errors.Is(err, conveyor.ErrInvalidQueue) || !errors.As(err, &qe) || qe.Name != q {
			t.Errorf("DeleteQueue(%q): %v, want a *broker.QueueNameError naming it", q, err)
		}
	}
	insp, err := conveyor.NewInspector(readOnly{e.d, e.d.(broker.Inspector)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := insp.DeleteQueue(e.ctx, "q", &conveyor.DeleteQueueOptions{Force: true}); !errors.Is(err, conveyor.ErrUnsupported) {
		t.Errorf("DeleteQueue on a driver without broker.QueueDeleter: %v, want ErrUnsupported", err)
	}
}

// readOnly is a driver with an Inspector that cannot delete queues.
type readOnly struct {
	broker.Driver
	broker.Inspector
}
