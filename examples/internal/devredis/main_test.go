package devredis

import (
	"testing"

	"go.uber.org/goleak"
)

// The embedded Redis runs a ticker goroutine: cleanup must stop it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
