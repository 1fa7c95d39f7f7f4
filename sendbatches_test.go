package conveyor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A refused duplicate fails the call that sent it, even when another call
// of the same round trip sent a message with the same ID that was stored
// (here: a job due now, which goes to ready unchecked).
func TestSharedRoundTripBlamesTheRefusedCall(t *testing.T) {
	t.Parallel()
	d, err := list.New(redistest.Client(t), &list.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, "k", nil, &EnqueueOptions{ID: "x", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	delayed, err := c.message(Request{Kind: "k", Opts: &EnqueueOptions{ID: "x", Delay: 2 * time.Hour}}, now)
	if err != nil {
		t.Fatal(err)
	}
	immediate, err := c.message(Request{Kind: "k", Opts: &EnqueueOptions{ID: "x"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	errs := c.sendBatches(ctx, [][]*broker.Message{{delayed}, {immediate}})
	if !errors.Is(errs[0], ErrDuplicate) {
		t.Errorf("the refused delayed call: %v, want ErrDuplicate", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("the stored immediate call: %v, want nil", errs[1])
	}
}
