package dashboard

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/history"
)

// Charts are drawn on the server as inline SVG from a queue's history
// (broker.Historian): they need no script, so they show with JavaScript
// off and under a Content-Security-Policy that allows none, and the
// stylesheet colours them by class.

// chart is one chart as its template draws it, in the units of its
// viewBox.
type chart struct {
	Title string
	// W and H are the viewBox; the plot is the box (plotLeft, plotTop) to
	// (W-plotRight, H-plotBottom).
	W, H   int
	Lines  []line
	YTicks []tick
	XTicks []tick
	// Empty says there were fewer than two samples: no line is drawn.
	Empty bool
}

// line is one series as drawn: its segments (a polyline each: a gap in the samples
// breaks the line) and its last value, for the legend.
type line struct {
	Name, Class string
	Segments    []string
	Last        string
}

// tick is a label on an axis, at Pos along it.
type tick struct {
	Pos   int
	Label string
}

const (
	chartW, chartH                           = 640, 180
	plotLeft, plotRight, plotTop, plotBottom = 48, 8, 8, 22
	sparkW, sparkH                           = 120, 24
)

// lineData is one series: its values, one per point time.
type lineData struct {
	name, class string
	values      []float64
	// skip says the series is drawn only when some value is not 0.
	skip bool
}

// points are the times of a chart's values, oldest first.
type points []time.Time

// depthSeries returns the sizes of samples as lineData, one point per
// sample.
func depthSeries(samples []broker.Sample) (points, []lineData) {
	at := make(points, len(samples))
	ss := []lineData{
		{name: "ready", class: "s-ready"}, {name: "in flight", class: "s-inflight"},
		{name: "delayed", class: "s-delayed"}, {name: "discarded", class: "s-discarded"},
		{name: "grouped", class: "s-grouped", skip: true}, {name: "limited", class: "s-limited", skip: true},
	}
	for k := range ss {
		ss[k].values = make([]float64, len(samples))
	}
	for k, s := range samples {
		at[k] = s.At
		for j, v := range []int64{s.Ready, s.InFlight, s.Delayed, s.Discarded, s.Grouped, s.Limited} {
			ss[j].values[k] = float64(v)
		}
	}
	return at, ss
}

// rateSeries returns the jobs processed and failed per minute between
// consecutive samples, each at the later sample's time (history.RateOf).
func rateSeries(samples []broker.Sample) (points, []lineData) {
	if len(samples) < 2 {
		return nil, []lineData{{name: "processed/min", class: "s-processed"}, {name: "failed/min", class: "s-failed"}}
	}
	n := len(samples) - 1
	at := make(points, n)
	done, failed := make([]float64, n), make([]float64, n)
	for k := 1; k < len(samples); k++ {
		r := history.RateOf(samples[k-1 : k+1])
		at[k-1], done[k-1], failed[k-1] = samples[k].At, r.Processed, r.Failed
	}
	return at, []lineData{{name: "processed/min", class: "s-processed", values: done}, {name: "failed/min", class: "s-failed", values: failed}}
}

// newChart lays out lineData over the times at, from from to to.
func newChart(title string, from, to time.Time, at points, ss []lineData) chart {
	c := chart{Title: title, W: chartW, H: chartH}
	plotW, plotH := chartW-plotLeft-plotRight, chartH-plotTop-plotBottom
	top := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			top = max(top, v)
		}
	}
	top = niceCeil(top)
	for _, f := range []float64{0, 0.5, 1} {
		c.YTicks = append(c.YTicks, tick{Pos: plotTop + plotH - int(math.Round(f*float64(plotH))), Label: short(f * top)})
	}
	span := to.Sub(from)
	for _, f := range []float64{0, 0.5, 1} {
		t := from.Add(time.Duration(f * float64(span)))
		c.XTicks = append(c.XTicks, tick{Pos: plotLeft + int(math.Round(f*float64(plotW))), Label: clock(t, span)})
	}
	if len(at) < 2 {
		c.Empty = true
		return c
	}
	x := func(t time.Time) float64 {
		return float64(plotLeft) + float64(plotW)*float64(t.Sub(from))/float64(span)
	}
	y := func(v float64) float64 { return float64(plotTop+plotH) - float64(plotH)*v/top }
	for _, s := range ss {
		if s.skip && !nonZero(s.values) {
			continue
		}
		c.Lines = append(c.Lines, line{Name: s.name, Class: s.class, Last: short(s.values[len(s.values)-1]),
			Segments: segments(at, s.values, x, y)})
	}
	return c
}

// spark is a small chart of one lineData, without axes, for a table's cell.
type spark struct {
	W, H     int
	Segments []string
	// Title says what it shows, for a tooltip and screen readers.
	Title string
}

// newSpark draws values over at, from from to to, scaled to its own top.
func newSpark(title string, from, to time.Time, at points, values []float64) spark {
	sp := spark{W: sparkW, H: sparkH, Title: title}
	if len(at) < 2 {
		return sp
	}
	top := 0.0
	for _, v := range values {
		top = max(top, v)
	}
	top = max(top, 1)
	span := float64(to.Sub(from))
	sp.Segments = segments(at, values,
		func(t time.Time) float64 { return float64(sparkW) * float64(t.Sub(from)) / span },
		func(v float64) float64 { return float64(sparkH-1) - float64(sparkH-2)*v/top })
	return sp
}

// segments returns the points attribute of each polyline that draws
// values over at, placed by x and y: a gap in the samples starts a new
// one.
func segments(at points, values []float64, x func(time.Time) float64, y func(float64) float64) []string {
	var out []string
	breaks := gaps(at)
	var b strings.Builder
	for k, t := range at {
		if k > 0 && breaks[k] {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x(t), y(values[k]))
	}
	return append(out, b.String())
}

// gaps marks the points that follow a gap in the samples (no keeper
// sampled for a while): a step over 2.5 times the shortest step.
func gaps(at points) []bool {
	step := time.Duration(math.MaxInt64)
	for k := 1; k < len(at); k++ {
		step = min(step, at[k].Sub(at[k-1]))
	}
	out := make([]bool, len(at))
	for k := 1; k < len(at); k++ {
		out[k] = at[k].Sub(at[k-1]) > step*5/2
	}
	return out
}

func nonZero(vs []float64) bool {
	for _, v := range vs {
		if v != 0 {
			return true
		}
	}
	return false
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten; at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// short writes v for an axis or legend: whole numbers with k and M
// suffixes, one decimal below 10.
func short(v float64) string {
	unit := ""
	switch {
	case v >= 1e6:
		v, unit = v/1e6, "M"
	case v >= 1e4:
		v, unit = v/1e3, "k"
	}
	if v >= 10 || v == math.Trunc(v) {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64) + unit
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + unit
}

// thin keeps at most about n of samples, evenly spaced, the last always:
// a chart has no more pixels than that across. Rates between the samples
// kept are still exact averages, as the counters are cumulative.
func thin(samples []broker.Sample, n int) []broker.Sample {
	if len(samples) <= n {
		return samples
	}
	step := (len(samples) + n - 1) / n
	out := make([]broker.Sample, 0, n+1)
	for k := (len(samples) - 1) % step; k < len(samples); k += step {
		out = append(out, samples[k])
	}
	return out
}

// clock writes t in UTC for an axis of span: the time of day, with the
// date when the span is over a day.
func clock(t time.Time, span time.Duration) string {
	if span > 24*time.Hour {
		return t.UTC().Format("Jan 2 15:04")
	}
	return t.UTC().Format("15:04")
}

// chartRanges are the spans a queue's charts show (?range), the first the
// default.
var chartRanges = []struct {
	Name string
	Span time.Duration
}{{"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}
