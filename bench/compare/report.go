package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/conveyorq/conveyor/cmd/conveyor/benchkit"
)

// writeComparison prints one row per workload and figure: each system's
// median over the rounds (with the range when there are several), then
// each Conveyor driver's ratio to asynq. A ratio above 1 is better for
// Conveyor on rates and worse on bytes per job.
func writeComparison(w io.Writer, results []benchkit.Result, workloads, systems []string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "WORKLOAD\tFIGURE\tUNIT\t")
	for _, s := range systems {
		fmt.Fprintf(tw, "%s\t", s)
	}
	for _, s := range systems {
		if s != "asynq" && slices.Contains(systems, "asynq") {
			fmt.Fprintf(tw, "%s/asynq\t", s)
		}
	}
	fmt.Fprintln(tw)
	for _, wl := range workloads {
		for _, fig := range figures(results, wl) {
			med := map[string]float64{}
			fmt.Fprintf(tw, "%s\t%s\t%s\t", wl, fig.Name, fig.Unit)
			for _, s := range systems {
				vals := values(results, wl, s, fig.Name)
				if len(vals) == 0 {
					fmt.Fprint(tw, "-\t")
					continue
				}
				med[s] = median(vals)
				cell := benchkit.FormatValue(med[s], fig.Unit)
				if len(vals) > 1 {
					cell += fmt.Sprintf(" (%s-%s)", benchkit.FormatValue(slices.Min(vals), fig.Unit), benchkit.FormatValue(slices.Max(vals), fig.Unit))
				}
				fmt.Fprintf(tw, "%s\t", cell)
			}
			for _, s := range systems {
				if s == "asynq" || !slices.Contains(systems, "asynq") {
					continue
				}
				a, okA := med["asynq"]
				v, okV := med[s]
				if !okA || !okV || a == 0 {
					fmt.Fprint(tw, "-\t")
					continue
				}
				fmt.Fprintf(tw, "%.2fx\t", v/a)
			}
			fmt.Fprintln(tw)
		}
	}
	return tw.Flush()
}

// figures lists the figures of a workload, in the order they were first
// reported.
func figures(results []benchkit.Result, workload string) []benchkit.Metric {
	var out []benchkit.Metric
	for _, r := range results {
		if r.Workload != workload {
			continue
		}
		for _, m := range r.Metrics {
			if !slices.ContainsFunc(out, func(o benchkit.Metric) bool { return o.Name == m.Name }) {
				out = append(out, m)
			}
		}
	}
	return out
}

func values(results []benchkit.Result, workload, system, figure string) []float64 {
	var out []float64
	for _, r := range results {
		if r.Workload == workload && r.System == system {
			if m, ok := r.Metric(figure); ok {
				out = append(out, m.Value)
			}
		}
	}
	return out
}

// median of vals (the mean of the middle two for an even count).
func median(vals []float64) float64 {
	s := slices.Sorted(slices.Values(vals))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
