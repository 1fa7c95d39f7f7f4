package dashboard

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/queueprobe"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// parsePages parses each page's template with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"since":     since,
		"stateName": stateName,
		"link":      link,
		"cell":      func(s string) string { return cut(s, maxCell) },
		"states":    func() []conveyor.JobState { return states },
		"pauseForm": func(csrf, queue string, paused bool) any {
			return struct {
				CSRF, Queue string
				Paused      bool
			}{csrf, queue, paused}
		},
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "queue", "job", "workers", "cron", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/chart.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// serveStatic serves the embedded stylesheet, the one static file.
func serveStatic(w http.ResponseWriter, r *http.Request) error {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "max-age=3600")
	http.ServeFileFS(w, r, sub, "style.css")
	return nil
}

// states are the states a queue's page lists, in tab order.
var states = []conveyor.JobState{conveyor.JobReady, conveyor.JobInFlight, conveyor.JobDelayed, conveyor.JobDiscarded, conveyor.JobFinished}

// stateNames lists the names ?state takes, for messages.
const stateNames = "ready, in-flight, delayed, discarded or finished"

// stateName is how the dashboard writes a state, as the CLI's -state
// takes it: "in-flight" rather than the Inspector's "in_flight".
func stateName(s conveyor.JobState) string { return strings.ReplaceAll(s.String(), "_", "-") }

// link builds a relative link to page with the query pairs given, name
// then value.
func link(page string, pairs ...any) string {
	q := url.Values{}
	for k := 0; k+1 < len(pairs); k += 2 {
		q.Set(fmt.Sprint(pairs[k]), fmt.Sprint(pairs[k+1]))
	}
	if len(q) == 0 {
		return page
	}
	return page + "?" + q.Encode()
}

// since writes t in UTC, to the second, with how far it is from now.
func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	rel := "now"
	switch {
	case d > 0:
		rel = d.String() + " ago"
	case d < 0:
		rel = "in " + (-d).String()
	}
	return t.UTC().Format("2006-01-02 15:04:05Z") + " (" + rel + ")"
}

// maxCell caps the bytes of an error a table's cell shows; a job's page
// shows up to maxShownPayload of it (a record's error is at most
// broker.MaxRecordError as stored by the drivers).
const maxCell = 200

// cut shortens s to at most n bytes, on a rune boundary, ending it with
// "…" when it cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// overview is the queues page: a page of the queues, sorted by name,
// those whose name holds ?match when it is set, with their figures.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	offset, err := intParam(q, "offset", 0, 0, 1<<30)
	if err != nil {
		return err
	}
	limit, err := intParam(q, "limit", queuePageSize, 1, maxPageSize)
	if err != nil {
		return err
	}
	match := q.Get("match")
	names, err := h.set.Queues(ctx)
	if err != nil {
		return err
	}
	total := len(names)
	if match != "" {
		names = slices.DeleteFunc(names, func(n string) bool { return !strings.Contains(n, match) })
	}
	shown := names[min(offset, len(names)):min(offset+limit, len(names))]
	figs, err := h.set.Figures(ctx, shown...)
	if err != nil {
		return err
	}
	rows := h.overviewRows(ctx, figs, time.Now())
	pager := func(off int) string {
		pairs := []any{"offset", off}
		if match != "" {
			pairs = append(pairs, "match", match)
		}
		if limit != queuePageSize {
			pairs = append(pairs, "limit", limit)
		}
		return link("./", pairs...)
	}
	data := struct {
		Prefix             string
		Queues             []overviewRow
		Match              string
		Total, Matched     int
		First, Last        int
		PrevLink, NextLink string
		HasPrev, HasNext   bool
	}{Prefix: h.set.Prefix(), Queues: rows, Match: match, Total: total, Matched: len(names),
		First: offset + 1, Last: offset + len(shown), HasPrev: offset > 0, HasNext: offset+len(shown) < len(names)}
	if data.HasPrev {
		data.PrevLink = pager(max(0, offset-limit))
	}
	if data.HasNext {
		data.NextLink = pager(offset + limit)
	}
	return h.render(w, r, "overview", "Queues", data)
}

// queuePageSize is the queues the overview lists by default.
const queuePageSize = 100

// pageSize is the jobs a queue's page lists by default; maxPageSize caps
// ?limit.
const pageSize, maxPageSize = 50, 500

// queue is one queue's page: its figures and a page of its jobs in one
// state.
func (h *Handler) queue(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	insp, probe, err := h.openQueue(r, q.Get("q"), false)
	if err != nil {
		return err
	}
	state := conveyor.JobReady
	if s := q.Get("state"); s != "" {
		if state, err = broker.ParseJobState(strings.ReplaceAll(s, "-", "_")); err != nil {
			return badRequest(fmt.Sprintf("state %q: want %s", s, stateNames))
		}
	}
	offset, err := intParam(q, "offset", 0, 0, 1<<30)
	if err != nil {
		return err
	}
	limit, err := intParam(q, "limit", pageSize, 1, maxPageSize)
	if err != nil {
		return err
	}
	sizes, err := insp.Queue(ctx, probe.Name)
	if err != nil {
		return err
	}
	// The records' figures are their own script call: records are kept
	// apart from the queue's jobs, and only where they were asked for.
	records, err := insp.RecordStats(ctx, probe.Name)
	if err != nil && !errors.Is(err, broker.ErrUnsupported) {
		return err
	}
	limits, err := insp.Limits(ctx, probe.Name)
	if err != nil && !errors.Is(err, broker.ErrUnsupported) {
		return err
	}
	canLimit := err == nil // the driver keeps limits: the page may set them
	page, err := insp.Jobs(ctx, probe.Name, state, &conveyor.ListOptions{Offset: offset, Limit: limit})
	if err != nil {
		return err
	}
	charts, err := h.charts(r, insp, probe.Name, time.Now())
	if err != nil {
		return err
	}
	data := struct {
		Queue     queueprobe.Figures
		Limits    []broker.Limit
		Charts    queueCharts
		CanLimit  bool
		State     conveyor.JobState
		Counts    map[conveyor.JobState]int64
		Records   conveyor.RecordStats
		Page      *conveyor.JobPage
		First     int
		Last      int
		Prev      int
		HasPrev   bool
		Next      int
		HasNext   bool
		Purgeable bool
	}{
		Queue: queueprobe.Figures{Queue: probe, QueueSizes: sizes}, State: state, Page: page,
		Counts: map[conveyor.JobState]int64{conveyor.JobReady: sizes.Ready, conveyor.JobInFlight: sizes.InFlight,
			conveyor.JobDelayed: sizes.Delayed, conveyor.JobDiscarded: sizes.Discarded, conveyor.JobFinished: records.Count},
		Records: records, Limits: limits, CanLimit: canLimit, Charts: charts,
		First: offset + 1, Last: offset + len(page.Jobs), Prev: max(0, offset-limit), HasPrev: offset > 0,
		// Leased jobs cannot be purged; records are dropped by retention alone.
		Purgeable: state != conveyor.JobInFlight && state != conveyor.JobFinished,
	}
	data.Next, data.HasNext = page.Next()
	return h.render(w, r, "queue", "Queue "+probe.Name, data)
}

// job is one job's page, found by ID in every state or in ?state only. A
// finished job's page shows its record, with its result where the
// payload would be: a record keeps neither payload nor headers.
func (h *Handler) job(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	insp, probe, err := h.openQueue(r, q.Get("q"), false)
	if err != nil {
		return err
	}
	id := strings.TrimSpace(q.Get("id"))
	if id == "" {
		return badRequest("no job ID given")
	}
	var only []conveyor.JobState
	if s := q.Get("state"); s != "" {
		st, err := broker.ParseJobState(strings.ReplaceAll(s, "-", "_"))
		if err != nil {
			return badRequest(fmt.Sprintf("state %q: want %s", s, stateNames))
		}
		only = append(only, st)
	}
	j, err := insp.Job(r.Context(), probe.Name, id, only...)
	if errors.Is(err, conveyor.ErrJobNotFound) {
		return fmt.Errorf("job %q %w in queue %q: it may have finished without a record "+
			"(records are kept only where a pool or the job asks for one)", id, errNotFound, probe.Name)
	}
	if err != nil {
		return err
	}
	headers := make([]string, 0, len(j.Headers))
	for k := range j.Headers {
		headers = append(headers, k)
	}
	slices.Sort(headers)
	data := struct {
		Job         *conveyor.JobInfo
		HeaderNames []string
		// Payload is the job's payload (its stored form when it could not be
		// decoded); Result a finished job's result instead, and Error the
		// error that ended it.
		Payload, Result shownPayload
		Error           string
	}{Job: j, HeaderNames: headers}
	switch {
	case j.Record != nil:
		data.Result, data.Error = showPayload(j.Record.Result), cut(j.Record.Error, maxShownPayload)
	case j.Raw != nil:
		data.Payload = showPayload(j.Raw)
	default:
		data.Payload = showPayload(j.Payload)
	}
	return h.render(w, r, "job", "Job "+j.ID, data)
}

// workers is the page of the live worker pools and their running jobs.
func (h *Handler) workers(w http.ResponseWriter, r *http.Request) error {
	ws, err := h.set.Shared().Workers(r.Context())
	if err != nil {
		return err
	}
	return h.render(w, r, "workers", "Workers", ws)
}

// openQueue validates the queue name and finds its driver; write as in
// queueprobe.Set.DriverOf.
func (h *Handler) openQueue(r *http.Request, name string, write bool) (*conveyor.Inspector, queueprobe.Queue, error) {
	if err := broker.ValidateQueue(name); err != nil {
		return nil, queueprobe.Queue{}, badRequest(fmt.Sprintf("queue %q: %v", name, err))
	}
	return h.set.Open(r.Context(), name, write, false)
}

// intParam reads the integer parameter name of q, def when absent,
// refusing one outside [lo, hi].
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badRequest(fmt.Sprintf("%s %q: want a number from %d to %d", name, s, lo, hi))
	}
	return n, nil
}
