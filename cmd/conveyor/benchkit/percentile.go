package benchkit

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the q-quantile (0 < q <= 1) of sorted by the nearest
// rank: the smallest sample with at least q of the samples at or below it.
// It returns 0 for no samples.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Distribution summarises samples of a duration.
type Distribution struct {
	N             int
	P50, P90, P99 time.Duration
	Min, Max      time.Duration
	// Negative counts the samples under zero (a timer that ran early).
	Negative int
}

// Summarise sorts samples in place and summarises them.
func Summarise(samples []time.Duration) Distribution {
	slices.Sort(samples)
	d := Distribution{N: len(samples)}
	if len(samples) == 0 {
		return d
	}
	d.P50 = Percentile(samples, 0.50)
	d.P90 = Percentile(samples, 0.90)
	d.P99 = Percentile(samples, 0.99)
	d.Min, d.Max = samples[0], samples[len(samples)-1]
	for _, s := range samples {
		if s >= 0 {
			break
		}
		d.Negative++
	}
	return d
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
