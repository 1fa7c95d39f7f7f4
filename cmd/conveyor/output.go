package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/conveyorq/conveyor"
)

// writeJSON prints v as indented JSON, for scripts.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a writer of aligned columns; Flush it at the end.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// cell makes s safe and short for a table cell or a line of text: control
// characters (a terminal's escape sequences, line breaks) are written as
// Go escapes, and text past max runes is cut with "…".
func cell(s string, max int) string {
	if s == "" {
		return "-"
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max {
			b.WriteString("…")
			break
		}
		if unicode.IsPrint(r) && r != '\t' {
			b.WriteRune(r)
		} else {
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		}
		n++
	}
	return b.String()
}

// ago writes t relative to now, "3m20s ago" or "in 5s", to the second;
// "-" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	switch {
	case d > 0:
		return d.String() + " ago"
	case d < 0:
		return "in " + (-d).String()
	}
	return "now"
}

// when writes t in full, in the local zone, with how long ago it was.
func when(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST") + " (" + ago(now, t) + ")"
}

// jobOut is a job in the JSON output. Times are RFC 3339 in UTC; those
// a state does not have are left out.
type jobOut struct {
	ID            string            `json:"id"`
	Queue         string            `json:"queue"`
	Kind          string            `json:"kind"`
	State         string            `json:"state"`
	Attempt       int               `json:"attempt"`
	MaxAttempts   int               `json:"max_attempts,omitzero"`
	Recoveries    int               `json:"recoveries"`
	TimeoutMS     int64             `json:"timeout_ms,omitzero"`
	EnqueuedAt    time.Time         `json:"enqueued_at,omitzero"`
	RunAt         time.Time         `json:"run_at,omitzero"`
	LeaseDeadline time.Time         `json:"lease_deadline,omitzero"`
	LeasedAt      time.Time         `json:"leased_at,omitzero"`
	Consumer      string            `json:"consumer,omitempty"`
	Reason        string            `json:"reason,omitempty"`
	DiscardedAt   time.Time         `json:"discarded_at,omitzero"`
	Headers       map[string]string `json:"headers,omitempty"`
	// Payload is the payload as text when it is valid UTF-8
	// (PayloadEncoding "text"), else in base64 ("base64").
	Payload         string `json:"payload"`
	PayloadEncoding string `json:"payload_encoding"`
	// RawBase64 is the stored form of a job that could not be decoded.
	RawBase64 string `json:"raw_base64,omitempty"`
	// Record is a finished job's record (state "finished").
	Record *conveyor.JobRecord `json:"record,omitempty"`
}

func newJobOut(j *conveyor.JobInfo) jobOut {
	o := jobOut{
		ID: j.ID, Queue: j.Queue, Kind: j.Kind, State: stateName(j.State),
		Attempt: j.Attempt(), MaxAttempts: j.MaxAttempts, Recoveries: j.Recoveries, TimeoutMS: j.Timeout.Milliseconds(),
		EnqueuedAt: j.EnqueuedAt.UTC(), RunAt: j.RunAt.UTC(), LeaseDeadline: j.LeaseDeadline.UTC(), LeasedAt: j.LeasedAt.UTC(),
		Consumer: j.Consumer, Reason: j.Reason, DiscardedAt: j.DiscardedAt.UTC(), Headers: j.Headers,
		Payload: string(j.Payload), PayloadEncoding: "text", Record: j.Record,
	}
	if !utf8.Valid(j.Payload) {
		o.Payload, o.PayloadEncoding = base64.StdEncoding.EncodeToString(j.Payload), "base64"
	}
	if j.Raw != nil {
		o.RawBase64 = base64.StdEncoding.EncodeToString(j.Raw)
	}
	return o
}

// maxShownPayload caps the payload bytes `job` prints as text; --json
// prints all.
const maxShownPayload = 4096

// showPayload writes p for a person: JSON indented, other text as it is,
// anything with control characters or invalid UTF-8 quoted, at most
// maxShownPayload bytes of it.
func showPayload(w io.Writer, p []byte) {
	if len(p) == 0 {
		fmt.Fprintln(w, "  (empty)")
		return
	}
	shown := p[:min(len(p), maxShownPayload)]
	var b bytes.Buffer
	switch {
	case len(shown) == len(p) && json.Valid(p) && json.Indent(&b, p, "  ", "  ") == nil:
		fmt.Fprintf(w, "  %s\n", b.Bytes())
	case utf8.Valid(shown) && !bytes.ContainsFunc(shown, func(r rune) bool { return !unicode.IsPrint(r) && r != '\n' && r != '\t' }):
		fmt.Fprintf(w, "  %s\n", bytes.ReplaceAll(shown, []byte("\n"), []byte("\n  ")))
	default:
		fmt.Fprintf(w, "  %q\n", shown)
	}
	if len(shown) < len(p) {
		fmt.Fprintf(w, "  … %d more bytes (-json prints all)\n", len(p)-len(shown))
	}
}
