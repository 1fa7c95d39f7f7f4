package retry_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/retry"
)

// top draws the largest value a Rand may return, so Delay returns the
// ceiling itself; bottom draws 0.
func top(n int64) int64  { return n - 1 }
func bottom(int64) int64 { return 0 }

// TestExponentialFullJitter: delays fill the whole of [0, ceiling], not a
// band under the ceiling, and never leave it.
func TestExponentialFullJitter(t *testing.T) {
	t.Parallel()
	p := retry.Exponential{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond, Rand: retry.SeededRand(1)}
	const samples = 20_000
	for attempt, ceil := range map[int]time.Duration{1: 20 * time.Millisecond, 2: 40 * time.Millisecond, 3: 80 * time.Millisecond, 4: 100 * time.Millisecond, 9: 100 * time.Millisecond} {
		if got := p.Ceiling(attempt); got != ceil {
			t.Fatalf("Ceiling(%d) = %v, want %v", attempt, got, ceil)
		}
		lo, hi, sum := time.Duration(math.MaxInt64), time.Duration(0), 0.0
		for range samples {
			d := p.Delay(attempt, nil)
			if d < 0 || d > ceil {
				t.Fatalf("Delay(%d) = %v, outside [0, %v]", attempt, d, ceil)
			}
			lo, hi, sum = min(lo, d), max(hi, d), sum+float64(d)
		}
		// Uniform over [0, ceil]: the extremes come close to both ends and
		// the mean sits in the middle (for 20,000 draws its standard error
		// is 0.2% of ceil; the seed makes the run repeatable anyway).
		mean := time.Duration(sum / samples)
		if lo > ceil/50 || hi < ceil-ceil/50 {
			t.Errorf("attempt %d: delays span [%v, %v], want nearly all of [0, %v]", attempt, lo, hi, ceil)
		}
		if mean < ceil*45/100 || mean > ceil*55/100 {
			t.Errorf("attempt %d: mean delay %v, want about %v", attempt, mean, ceil/2)
		}
	}
}

// TestExponentialBoundsExact: the ceiling is reached exactly (the range is
// inclusive), it grows by Factor and stops at Max, and the floor is 0.
func TestExponentialBoundsExact(t *testing.T) {
	t.Parallel()
	p := retry.Exponential{Base: 10 * time.Millisecond, Max: time.Second, Factor: 3, Rand: top}
	for attempt, want := range map[int]time.Duration{
		-5: 10 * time.Millisecond, 0: 10 * time.Millisecond, 1: 10 * time.Millisecond,
		2: 30 * time.Millisecond, 3: 90 * time.Millisecond, 4: 270 * time.Millisecond,
		5: 810 * time.Millisecond, 6: time.Second, 60: time.Second,
	} {
		if got := p.Delay(attempt, nil); got != want {
			t.Errorf("Delay(%d) with the top draw = %v, want %v", attempt, got, want)
		}
	}
	p.Rand = bottom
	if got := p.Delay(5, nil); got != 0 {
		t.Errorf("Delay with the bottom draw = %v, want 0", got)
	}
	// A Rand that breaks its contract is clamped into the range.
	p.Rand = func(n int64) int64 { return n + 100 }
	if got := p.Delay(1, nil); got != 10*time.Millisecond {
		t.Errorf("Delay with an out-of-range draw = %v, want the ceiling 10ms", got)
	}
	p.Rand = func(int64) int64 { return -7 }
	if got := p.Delay(1, nil); got != 0 {
		t.Errorf("Delay with a negative draw = %v, want 0", got)
	}
}

func TestExponentialDefaults(t *testing.T) {
	t.Parallel()
	p := retry.Exponential{Rand: top}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 12: 2048 * time.Second, 13: time.Hour, 1000: time.Hour} {
		if got := p.Delay(attempt, nil); got != want {
			t.Errorf("zero Exponential: Delay(%d) = %v, want %v", attempt, got, want)
		}
	}
}

// TestExponentialNoOverflow: huge attempts, factors and caps stay in range.
func TestExponentialNoOverflow(t *testing.T) {
	t.Parallel()
	maxDur := time.Duration(math.MaxInt64)
	for _, p := range []retry.Exponential{
		{Base: time.Millisecond, Max: time.Hour},
		{Base: time.Nanosecond, Max: maxDur},
		{Base: time.Hour, Max: maxDur, Factor: 1e300},
		{Base: time.Second, Max: maxDur, Factor: 10},
		{Base: maxDur, Max: maxDur},
	} {
		for _, attempt := range []int{1000, 1 << 20, math.MaxInt} {
			ceil := p.Ceiling(attempt)
			if ceil != p.Max {
				t.Errorf("%+v: Ceiling(%d) = %v, want the cap %v", p, attempt, ceil, p.Max)
			}
			for _, draw := range []func(int64) int64{top, bottom, retry.SeededRand(uint64(attempt))} {
				p.Rand = draw
				if d := p.Delay(attempt, nil); d < 0 || d > p.Max {
					t.Errorf("%+v: Delay(%d) = %v, outside [0, %v]", p, attempt, d, p.Max)
				}
			}
			p.Rand = nil
		}
	}
	// Factor 1 keeps the ceiling at Base for ever.
	p := retry.Exponential{Base: 5 * time.Millisecond, Max: time.Hour, Factor: 1, Rand: top}
	if got := p.Delay(1000, nil); got != 5*time.Millisecond {
		t.Errorf("Factor 1: Delay(1000) = %v, want 5ms", got)
	}
}

func TestSeededRandRepeatable(t *testing.T) {
	t.Parallel()
	a, b, c := retry.SeededRand(7), retry.SeededRand(7), retry.SeededRand(8)
	same, differ := true, false
	for range 100 {
		x, y, z := a(1<<40), b(1<<40), c(1<<40)
		same = same && x == y
		differ = differ || x != z
		if x < 0 || x >= 1<<40 {
			t.Fatalf("draw %d outside [0, 2^40)", x)
		}
	}
	if !same || !differ {
		t.Fatalf("same seed gives the same draws: %v; another seed gives others: %v", same, differ)
	}
}

func TestConstantAndFunc(t *testing.T) {
	t.Parallel()
	if got := retry.Constant(250*time.Millisecond).Delay(99, nil); got != 250*time.Millisecond {
		t.Fatalf("Constant.Delay = %v, want 250ms", got)
	}
	f := retry.Func(func(attempt int, err error) time.Duration {
		return time.Duration(attempt) * time.Second
	})
	if got := f.Delay(3, nil); got != 3*time.Second {
		t.Fatalf("Func.Delay(3) = %v, want 3s", got)
	}
}

// TestValidation: every bad setting is an error naming where it is, never
// a panic; good settings pass.
func TestValidation(t *testing.T) {
	t.Parallel()
	bad := map[string]*retry.Rules{
		"Exponential negative Base": {Policy: retry.Exponential{Base: -1}},
		"Exponential negative Max":  {Policy: retry.Exponential{Max: -time.Second}},
		"Exponential Factor":        {Policy: retry.Exponential{Factor: 0.5}},
		"Exponential NaN":           {Policy: retry.Exponential{Factor: math.NaN()}},
		"Exponential Inf":           {Policy: retry.Exponential{Factor: math.Inf(1)}},
		"Exponential Base > Max":    {Policy: retry.Exponential{Base: time.Minute, Max: time.Second}},
		"Exponential Base > 1h":     {Policy: retry.Exponential{Base: 2 * time.Hour}},
		"Constant negative":         {Policy: retry.Constant(-time.Second)},
		"Func nil":                  {Policy: retry.Func(nil)},
		"MaxAttempts":               {MaxAttempts: -1},
		"Kinds MaxAttempts":         {Kinds: map[string]retry.Override{"k": {MaxAttempts: -2}}},
		"Kinds policy":              {Kinds: map[string]retry.Override{"k": {Policy: retry.Constant(-1)}}},
		"Kinds empty":               {Kinds: map[string]retry.Override{"": {MaxAttempts: 2}}},
		"Policies nil":              {Policies: map[string]retry.Policy{"x": nil}},
		"Policies empty name":       {Policies: map[string]retry.Policy{"": retry.Constant(0)}},
		"Policies bad":              {Policies: map[string]retry.Policy{"x": retry.Exponential{Factor: -1}}},
	}
	for name, r := range bad {
		err := r.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "retry: ") && !strings.Contains(err.Error(), ": retry: ") {
			t.Errorf("%s: Validate = %v, want an error", name, err)
		}
		if _, err := retry.Middleware(r); err == nil {
			t.Errorf("%s: Middleware accepted rules Validate refuses", name)
		}
	}
	good := []*retry.Rules{
		nil, {},
		{Policy: retry.Exponential{}, MaxAttempts: 3},
		{Policy: retry.Exponential{Base: time.Hour}}, // Base == default Max
		{Policy: retry.Exponential{Base: time.Millisecond, Max: time.Millisecond, Factor: 1}},
		{Policy: retry.Constant(0), Kinds: map[string]retry.Override{"k": {}}},
		{Policies: map[string]retry.Policy{"f": retry.Func(func(int, error) time.Duration { return 0 })}},
	}
	for i, r := range good {
		if err := r.Validate(); err != nil {
			t.Errorf("good rules %d: Validate = %v", i, err)
		}
	}
}
