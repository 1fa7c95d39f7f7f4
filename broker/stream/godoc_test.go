package stream_test

import (
	"testing"

	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/drivertest"
)

// Every method a user can call on a Driver is documented where go doc
// looks.
func TestMethodsDocumented(t *testing.T) {
	t.Parallel()
	drivertest.MethodsDocumented(t, &stream.Driver{})
}
