package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/history"
	"github.com/conveyorq/conveyor/internal/queueprobe"
)

// overviewRow is one queue on the overview: its figures, its rate of
// processed jobs over the last rateSpan and a sparkline of the last
// sparkSpan, from its history.
type overviewRow struct {
	queueprobe.Figures
	// Rate is the jobs processed per minute, "-" without two samples.
	Rate  string
	Spark spark
}

// rateSpan is the span of the overview's rates; sparkSpan that of its
// sparklines.
const rateSpan, sparkSpan = 5 * time.Minute, time.Hour // the spark's title says "hour"

// overviewRows reads the history of the last sparkSpan of every queue in
// figs, in one pipeline, and lays out their rows.
func (h *Handler) overviewRows(ctx context.Context, figs []queueprobe.Figures, now time.Time) []overviewRow {
	names := make([]string, len(figs))
	for k, f := range figs {
		names[k] = f.Name
	}
	from := now.Add(-sparkSpan)
	hs, err := h.set.Histories(ctx, from, names...)
	if err != nil {
		// The figures stand without the history: show them, and what
		// history could be read; log why the rest is missing.
		h.log.WarnContext(ctx, "dashboard: queue history unreadable", "err", err)
	}
	if hs == nil {
		hs = make([][]broker.Sample, len(names))
	}
	rows := make([]overviewRow, len(figs))
	for k, f := range figs {
		rows[k] = overviewRow{Figures: f, Rate: "-"}
		samples := hs[k]
		if r := history.RateOver(samples, now, rateSpan); r.Span > 0 {
			rows[k].Rate = short(r.Processed)
		}
		at, rs := rateSeries(thin(samples, sparkW))
		rows[k].Spark = newSpark("jobs processed per minute over the last hour", from, now, at, rs[0].values)
	}
	return rows
}

// queueCharts is the charts part of a queue's page.
type queueCharts struct {
	// Ranges link to the page over each span; Range is the one shown.
	Ranges []rangeLink
	Range  string
	Charts []chart
	// None says the driver keeps no history (pubsub).
	None bool
	// Err says why the history could not be read: the rest of the page
	// stands without it.
	Err string
}

type rangeLink struct {
	Name, Href string
	Current    bool
}

// charts reads queue's history over the span ?range asks for and draws
// its throughput and depth charts.
func (h *Handler) charts(r *http.Request, insp *conveyor.Inspector, queue string, now time.Time) (queueCharts, error) {
	q := r.URL.Query()
	name := q.Get("range")
	if name == "" {
		name = chartRanges[0].Name
	}
	span := time.Duration(0)
	for _, c := range chartRanges {
		if name == c.Name {
			span = c.Span
		}
	}
	if span == 0 {
		return queueCharts{}, badRequest(fmt.Sprintf("range %q: want 1h, 6h, 24h or 7d", name))
	}
	out := queueCharts{Range: name}
	for _, c := range chartRanges {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("range", c.Name)
		out.Ranges = append(out.Ranges, rangeLink{Name: c.Name, Href: "queue?" + v.Encode(), Current: c.Name == name})
	}
	from := now.Add(-span)
	samples, err := insp.History(r.Context(), queue, from)
	if errors.Is(err, broker.ErrUnsupported) {
		out.None = true
		return out, nil
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "dashboard: queue history unreadable", "queue", queue, "err", err)
		out.Err = err.Error()
		return out, nil
	}
	samples = thin(samples, chartW-plotLeft-plotRight)
	at, rs := rateSeries(samples)
	out.Charts = append(out.Charts, newChart("Jobs per minute", from, now, at, rs))
	at, ds := depthSeries(samples)
	out.Charts = append(out.Charts, newChart("Jobs by state", from, now, at, ds))
	return out, nil
}
