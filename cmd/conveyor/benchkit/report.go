package benchkit

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Result is what one workload measured on one system.
type Result struct {
	Workload string   `json:"workload"`
	System   string   `json:"system"`
	Metrics  []Metric `json:"metrics"`
}

// Metric is one figure of a Result.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Goal is the issue-7 target for the figure ("<= 160"), if it has one.
	Goal string `json:"goal,omitempty"`
	// Met says whether Value meets Goal; absent without a goal.
	Met *bool `json:"met,omitempty"`
}

// Metric returns the named figure and whether r has it.
func (r Result) Metric(name string) (Metric, bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// withGoal sets m's goal: op is ">=" or "<=".
func (m Metric) withGoal(op string, v float64) Metric {
	m.Goal = op + " " + FormatValue(v, m.Unit)
	met := m.Value >= v
	if op == "<=" {
		met = m.Value <= v
	}
	m.Met = &met
	return m
}

// FormatValue renders a figure for a table: rates and byte counts as
// integers with thousands separators, milliseconds, commands and
// microseconds per job with two decimals, ratios with three.
func FormatValue(v float64, unit string) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case unit == "ms":
		return strconv.FormatFloat(v, 'f', 2, 64)
	case unit == "ratio":
		return strconv.FormatFloat(v, 'f', 3, 64)
	case unit == "cmd/s":
		return strconv.FormatFloat(v, 'f', 1, 64)
	case unit == "cmd" || unit == "µs":
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return thousands(int64(math.Round(v)))
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// WriteTable renders results as an aligned table, one row per figure.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSYSTEM\tFIGURE\tVALUE\tUNIT\tGOAL\t")
	for _, r := range results {
		for _, m := range r.Metrics {
			goal := m.Goal
			if m.Met != nil {
				if *m.Met {
					goal += " (met)"
				} else {
					goal += " (MISSED)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Workload, r.System, m.Name, FormatValue(m.Value, m.Unit), m.Unit, goal)
		}
	}
	return tw.Flush()
}

// Report is the JSON document of a run.
type Report struct {
	Started      string   `json:"started"`
	GoVersion    string   `json:"go_version"`
	GOMAXPROCS   int      `json:"gomaxprocs"`
	RedisVersion string   `json:"redis_version"`
	RedisAddr    string   `json:"redis_addr"`
	Config       Config   `json:"config"`
	Results      []Result `json:"results"`
}

// WriteJSON writes rep as indented JSON.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
