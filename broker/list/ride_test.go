package list

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/ridetest"
)

// TestAcksRideOnlyWhenAsked: see ridetest.AcksRide.
func TestAcksRideOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	d, err := New(redistest.Client(t), &Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	ridetest.AcksRide(t, d, func(c broker.Consumer, n int) bool {
		_, alone := c.(*consumer).ackVia(n).(redis.UniversalClient)
		return !alone
	}, func(c broker.Consumer) { c.(*consumer).RideAcks() })
}
