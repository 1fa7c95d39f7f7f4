package conveyortest

import (
	"fmt"
	"sync"
	"time"
)

// Clock is a fake clock that only moves when a test moves it. A Driver
// built on it judges every due time and lease deadline by it, so a delayed
// job, a retry's backoff or an expired lease comes due when the test calls
// Advance, not when wall-clock time passes. It is safe for concurrent use.
//
// A nil *Clock is the system clock: its Now is time.Now.
type Clock struct {
	mu    sync.Mutex
	now   time.Time
	moved []func() // called after each move, outside mu
}

// DefaultStart is where a Clock made with a zero start begins:
// 2026-01-01 00:00:00 UTC, a fixed time so that tests and their output are
// the same on every run.
var DefaultStart = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// NewClock returns a clock standing at start (DefaultStart when zero).
func NewClock(start time.Time) *Clock {
	if start.IsZero() {
		start = DefaultStart
	}
	return &Clock{now: start.Round(0)}
}

// Now returns the clock's time; time.Now() for a nil clock.
func (c *Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d ahead and wakes whatever waits on it: the
// fetches and promoters of the drivers built on it look again at once. A
// clock never goes back: a negative d is a programmer error and panics,
// as does advancing a nil (system) clock.
func (c *Clock) Advance(d time.Duration) {
	if c == nil {
		panic("conveyortest: Advance on the system clock (a nil *Clock)")
	}
	if d < 0 {
		panic(fmt.Sprintf("conveyortest: Advance(%v): a clock never goes back", d))
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	moved := c.moved
	c.mu.Unlock()
	for _, f := range moved {
		f()
	}
}

// onMove registers f to run after each Advance.
func (c *Clock) onMove(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moved = append(c.moved, f)
}

// fake reports whether c is a fake clock (not the system clock).
func (c *Clock) fake() bool { return c != nil }
