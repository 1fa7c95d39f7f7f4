package conveyortest_test

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
)

// Receipt is the payload the tests' jobs carry.
type Receipt struct {
	OrderID string `json:"order_id"`
}

// env is a driver on a fake clock, with a client on the same clock.
type env struct {
	clock  *conveyortest.Clock
	d      *conveyortest.Driver
	client *conveyor.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clock := conveyortest.NewClock(time.Time{})
	d, err := conveyortest.New(&conveyortest.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	client, err := conveyortest.NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &env{clock: clock, d: d, client: client}
}

func (e *env) enqueue(t *testing.T, kind string, args any, opts *conveyor.EnqueueOptions) {
	t.Helper()
	if _, err := e.client.Enqueue(context.Background(), kind, args, opts); err != nil {
		t.Fatalf("Enqueue(%q): %v", kind, err)
	}
}

func (e *env) runner(t *testing.T, h conveyor.Handler, cfg *conveyortest.RunnerConfig) *conveyortest.Runner {
	t.Helper()
	r, err := conveyortest.NewRunner(e.d, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func drain(t *testing.T, r *conveyortest.Runner, queue string) []*conveyortest.Result {
	t.Helper()
	res, err := r.Drain(context.Background(), queue)
	if err != nil {
		t.Fatalf("Drain(%q): %v", queue, err)
	}
	return res
}

func outcomes(rs []*conveyortest.Result) []conveyor.Outcome {
	out := make([]conveyor.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Settlement.Outcome
	}
	return out
}

func sizes(t *testing.T, d *conveyortest.Driver, queue string) *conveyor.QueueSizes {
	t.Helper()
	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := insp.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
