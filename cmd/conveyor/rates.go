package main

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/history"
)

// The rates of queues and stats come from each queue's history: the
// samples of its counters its keeper records (worker.Config.HistoryEvery,
// one a minute by default). A rate is the growth of the counters from the
// oldest to the newest sample of a window, per minute, so it needs two
// samples in the window.

const (
	// shortWindow is the span of the rates of queues, and of the first of
	// stats; longWindow that of the second of stats.
	shortWindow, longWindow = 5 * time.Minute, time.Hour
	// sampleSlack is how much older than now minus a window a sample may
	// be and still count: the newest sample is up to an interval old, so a
	// window ending at it reaches that much further back.
	sampleSlack = history.DefaultEvery
	// staleAfter is the age from which stats says when the newest sample
	// was taken: a sample interval, and time for a keeper late to take the
	// next.
	staleAfter = sampleSlack + 30*time.Second
)

// rateOut is a queue's throughput over a window of its history, in the
// JSON output of queues and stats.
type rateOut struct {
	// ProcessedPerMin and FailedPerMin are jobs per minute, rounded to
	// thousandths.
	ProcessedPerMin float64 `json:"processed_per_min"`
	FailedPerMin    float64 `json:"failed_per_min"`
	// SpanSeconds is the time between the oldest and the newest sample the
	// rates come from: the window, or less when the history is younger.
	SpanSeconds float64 `json:"span_seconds"`
	// LastSample is when the newest of them was taken.
	LastSample time.Time `json:"last_sample"`
}

// rateOver returns the rate over the window of samples (oldest first)
// that ends at the newest one (history.RateOver); nil
// when fewer than two samples are in it.
func rateOver(samples []broker.Sample, now time.Time, window time.Duration) *rateOut {
	r := history.RateOver(samples, now, window)
	if r.Span <= 0 {
		return nil
	}
	// Rounded so that JSON shows 0.6, not 0.6000000000000001.
	thousandths := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	return &rateOut{ProcessedPerMin: thousandths(r.Processed), FailedPerMin: thousandths(r.Failed),
		SpanSeconds: r.Span.Seconds(), LastSample: r.Last.UTC()}
}

// cells writes r for the table of queues: its processed and failed rates,
// "-" without a rate.
func (r *rateOut) cells() (processed, failed string) {
	if r == nil {
		return "-", "-"
	}
	return perMin(r.ProcessedPerMin), perMin(r.FailedPerMin)
}

// line writes r for stats: the rates and the span of history they cover,
// which ends now or, when the newest sample is older than staleAfter,
// when it was taken.
func (r *rateOut) line(now time.Time) string {
	if r == nil {
		return "- (fewer than two samples in its history; pools take one a minute by default)"
	}
	span := time.Duration(math.Round(r.SpanSeconds * float64(time.Second))).Round(time.Second)
	s := fmt.Sprintf("%s processed/min, %s failed/min, ", perMin(r.ProcessedPerMin), perMin(r.FailedPerMin))
	if now.Sub(r.LastSample) < staleAfter {
		return s + "over the last " + span.String()
	}
	return s + "over " + span.String() + " up to " + ago(now, r.LastSample)
}

// perMin writes a rate with one decimal place, or as a whole number from
// 100 on, where a tenth says nothing.
func perMin(v float64) string {
	if math.Round(v*10) >= 1000 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
