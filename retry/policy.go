package retry

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Policy chooses how long a failed job waits before its next run.
//
// Delay is called with the number of the run that just failed (1 for the
// first run, so 1 asks for the delay before the first retry) and the error
// the handler returned. It must be safe for concurrent use: a pool calls it
// from many goroutines. A negative delay means at once.
type Policy interface {
	Delay(attempt int, err error) time.Duration
}

// validator is implemented by policies whose configuration can be wrong;
// Rules.Validate calls it for every policy it holds.
type validator interface {
	Validate() error
}

// Exponential is capped exponential backoff with full jitter: the delay
// before retry number n is drawn uniformly from [0, min(Max, Base×Factor^(n-1))].
// Drawing from the whole range, rather than around the ceiling, spreads out
// jobs that failed together (a downstream outage) so they do not come back
// together.
//
// The zero value is valid: from 1s, doubling, capped at 1h.
type Exponential struct {
	// Base is the ceiling of the first retry's delay. Defaults to 1s.
	Base time.Duration
	// Max caps the ceiling of every delay. Defaults to 1h.
	Max time.Duration
	// Factor multiplies the ceiling at each retry; at least 1. Defaults
	// to 2.
	Factor float64
	// Rand returns a uniform integer in [0, n) for n > 0. It must be safe
	// for concurrent use. Defaults to math/rand/v2's Int64N; tests inject
	// SeededRand for repeatable delays.
	Rand func(n int64) int64
}

// Defaults of Exponential.
const (
	DefaultBase   = time.Second
	DefaultMax    = time.Hour
	DefaultFactor = 2.0
)

// Validate reports a configuration Delay cannot honour.
func (e Exponential) Validate() error {
	switch {
	case e.Base < 0:
		return fmt.Errorf("retry: Exponential: negative Base %v", e.Base)
	case e.Max < 0:
		return fmt.Errorf("retry: Exponential: negative Max %v", e.Max)
	case math.IsNaN(e.Factor) || math.IsInf(e.Factor, 0) || (e.Factor != 0 && e.Factor < 1):
		return fmt.Errorf("retry: Exponential: Factor %v, want a finite number of at least 1", e.Factor)
	}
	base, maxDelay, _ := e.params()
	if base > maxDelay {
		return fmt.Errorf("retry: Exponential: Base %v above Max %v", base, maxDelay)
	}
	return nil
}

func (e Exponential) params() (base, maxDelay time.Duration, factor float64) {
	base, maxDelay, factor = e.Base, e.Max, e.Factor
	if base == 0 {
		base = DefaultBase
	}
	if maxDelay == 0 {
		maxDelay = DefaultMax
	}
	if factor == 0 {
		factor = DefaultFactor
	}
	return base, maxDelay, factor
}

// Ceiling returns the upper bound of the delay before retry number attempt:
// min(Max, Base×Factor^(attempt-1)). Attempts below 1 count as 1. It never
// overflows: the product is computed in floating point and capped before it
// becomes a Duration.
func (e Exponential) Ceiling(attempt int) time.Duration {
	base, maxDelay, factor := e.params()
	if base <= 0 || maxDelay <= 0 {
		return 0
	}
	c := float64(base) * math.Pow(factor, float64(max(attempt, 1)-1))
	// !(c < max) also catches +Inf and NaN. float64(maxDelay) may round up
	// to 2^63, so a c below it still converts to an int64 exactly enough.
	if !(c < float64(maxDelay)) {
		return maxDelay
	}
	return time.Duration(c)
}

// Delay draws the delay before retry number attempt uniformly from
// [0, Ceiling(attempt)], both ends included. An invalid configuration (see
// Validate) is clamped rather than honoured: negative durations count as 0.
func (e Exponential) Delay(attempt int, _ error) time.Duration {
	ceil := e.Ceiling(attempt)
	if ceil <= 0 {
		return 0
	}
	draw := e.Rand
	if draw == nil {
		draw = rand.Int64N
	}
	n := int64(ceil)
	if n < math.MaxInt64 {
		n++ // include the ceiling itself
	}
	d := draw(n)
	if d < 0 || d >= n { // a misbehaving Rand stays inside the range
		d = min(max(d, 0), n-1)
	}
	return time.Duration(d)
}

// Constant waits the same time before every retry:
// retry.Constant(5*time.Second).
type Constant time.Duration

// Delay returns c.
func (c Constant) Delay(int, error) time.Duration { return time.Duration(c) }

// Validate reports a negative delay.
func (c Constant) Validate() error {
	if c < 0 {
		return fmt.Errorf("retry: Constant: negative delay %v", time.Duration(c))
	}
	return nil
}

// Func adapts a function to Policy: retry.Func(func(attempt int, err error)
// time.Duration { ... }). It must be safe for concurrent use.
type Func func(attempt int, err error) time.Duration

// Delay calls f(attempt, err).
func (f Func) Delay(attempt int, err error) time.Duration { return f(attempt, err) }

// Validate reports a nil function.
func (f Func) Validate() error {
	if f == nil {
		return errors.New("retry: Func: nil function")
	}
	return nil
}

// SeededRand returns a deterministic source for Exponential.Rand: the same
// seed gives the same sequence of draws (in the order they are made). It is
// safe for concurrent use.
func SeededRand(seed uint64) func(n int64) int64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(n int64) int64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Int64N(n)
	}
}
