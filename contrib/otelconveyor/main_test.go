package otelconveyor_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every pool goroutine started by a test must be gone when the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis keeps a pool reaper per shared client (redistest.Client).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}
