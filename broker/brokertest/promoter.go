package brokertest

import (
	"context"
	"testing"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
)

// Promote runs a delay.Promoter for queue on d until t ends: a driver with
// Capabilities.Delay keeps delayed messages and retries as timers, which
// become fetchable only when promoted. A driver with Delay must implement
// broker.Timers.
func Promote(t testing.TB, d broker.Driver, queue string) {
	t.Helper()
	if _, ok := d.(broker.Timers); !ok {
		t.Fatalf("driver %T has Capabilities.Delay but does not implement broker.Timers", d)
	}
	p, err := delay.NewPromoter(d, queue, nil)
	if err != nil {
		t.Fatalf("NewPromoter(%q): %v", queue, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
