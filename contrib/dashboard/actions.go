package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// action is a change a form POSTs.
type action struct {
	// write says it stores jobs in the queue's ready structure, which
	// differs by driver (queueprobe.Set.DriverOf).
	write bool
	// run does it on queue with the form's values and returns how many
	// jobs it handled and the state whose page the browser goes to next.
	run func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error)
	// overview sends the browser to the queues page afterwards (the queue
	// is gone).
	overview bool
}

// actions are the changes, by path.
var actions = map[string]action{
	"redrive": {write: true, run: func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error) {
		max, err := intParam(form, "max", 0, 0, 1<<30)
		if err != nil {
			return 0, 0, err
		}
		f := broker.DiscardFilter{ID: strings.TrimSpace(form.Get("id")), Kind: strings.TrimSpace(form.Get("kind"))}
		n, err := insp.Redrive(ctx, queue, f, max)
		return n, conveyor.JobDiscarded, err
	}},
	"purge": {run: func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error) {
		state, err := broker.ParseJobState(strings.ReplaceAll(form.Get("state"), "-", "_"))
		switch {
		case err != nil:
			return 0, 0, badRequest(fmt.Sprintf("state %q: want ready, delayed or discarded", form.Get("state")))
		case state == conveyor.JobInFlight:
			return 0, 0, badRequest("in-flight jobs cannot be purged: workers hold them under leases")
		case state == conveyor.JobFinished:
			return 0, 0, badRequest("records of finished jobs are not purged: their retention drops them")
		case form.Get("confirm") != "yes":
			return 0, 0, badRequest("tick the box to confirm the purge: purged jobs cannot be brought back")
		}
		max, err := intParam(form, "max", 0, 0, 1<<30)
		if err != nil {
			return 0, 0, err
		}
		n, err := insp.Purge(ctx, queue, state, max)
		return n, state, err
	}},
	"cancel": {run: func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error) {
		id := form.Get("id")
		if id == "" {
			return 0, 0, badRequest("no timer ID given")
		}
		pending, err := insp.Cancel(ctx, queue, id)
		if err == nil && !pending {
			err = fmt.Errorf("timer %q %w in queue %q: it fired or was cancelled before this cancel", id, errNotFound, queue)
		}
		return 1, conveyor.JobDelayed, err
	}},
	"reschedule": {run: func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error) {
		id := form.Get("id")
		if id == "" {
			return 0, 0, badRequest("no timer ID given")
		}
		at, err := parseWhen(strings.TrimSpace(form.Get("at")), time.Now())
		if err != nil {
			return 0, 0, badRequest(err.Error())
		}
		pending, err := insp.Reschedule(ctx, queue, id, at)
		if err == nil && !pending {
			err = fmt.Errorf("timer %q %w in queue %q: it fired or was cancelled before this reschedule", id, errNotFound, queue)
		}
		return 1, conveyor.JobDelayed, err
	}},
	"canceljob": {run: func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error) {
		id := strings.TrimSpace(form.Get("id"))
		if id == "" {
			return 0, 0, badRequest("no job ID given")
		}
		st, err := insp.CancelJob(ctx, queue, id)
		if err == nil && st == 0 {
			err = fmt.Errorf("job %q %w in queue %q: no job with this ID is delayed, ready or in flight "+
				"(it finished, was discarded, or never was)", id, errNotFound, queue)
		}
		// The page of the state it was in: a job waiting in a FIFO group's
		// or a concurrency limit's line is reported ready.
		return 1, st, err
	}},
	// setlimit writes: a raised or removed limit lets the jobs waiting
	// for a slot into the queue's ready structure.
	"setlimit": {write: true, run: func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error) {
		kind := strings.TrimSpace(form.Get("kind"))
		if form.Get("max") == "" {
			return 0, 0, badRequest(fmt.Sprintf("no limit given: a number of jobs from 1 to %d, or 0 to remove the limit", broker.MaxLimit))
		}
		n, err := intParam(form, "max", 0, 0, broker.MaxLimit)
		if err != nil {
			return 0, 0, err
		}
		if err := broker.ValidateLimit(queue, kind, n); err != nil {
			return 0, 0, badRequest(err.Error())
		}
		return n, conveyor.JobReady, insp.SetLimit(ctx, queue, kind, n)
	}},
	"delete": {overview: true, run: func(ctx context.Context, insp *conveyor.Inspector, queue string, form url.Values) (int, conveyor.JobState, error) {
		if form.Get("confirm") != queue {
			return 0, 0, badRequest(fmt.Sprintf("type the queue's name, %q, to confirm the delete: its jobs cannot be brought back", queue))
		}
		del, err := insp.DeleteQueue(ctx, queue, &conveyor.DeleteQueueOptions{Force: form.Get("force") == "yes"})
		var ife *broker.InFlightError
		if errors.As(err, &ife) {
			return 0, 0, fmt.Errorf("%d jobs of %q are in flight, so the delete changed nothing: wait for them, or tick the box that deletes them too (their workers' settles then fail): %w", ife.InFlight, queue, err)
		}
		if err != nil {
			return 0, 0, err
		}
		return int(del.Jobs()), 0, nil
	}},
	"pause": {run: func(ctx context.Context, insp *conveyor.Inspector, queue string, _ url.Values) (int, conveyor.JobState, error) {
		return 0, conveyor.JobReady, insp.Pause(ctx, queue)
	}},
	"resume": {run: func(ctx context.Context, insp *conveyor.Inspector, queue string, _ url.Values) (int, conveyor.JobState, error) {
		return 0, conveyor.JobReady, insp.Resume(ctx, queue)
	}},
}

// parseWhen reads the new due time of a reschedule: a duration from now
// ("90s", "30m", "2h"), or a time in RFC 3339 ("2026-11-25T08:00:00Z") or
// as a browser's datetime-local field sends it ("2026-11-25T08:00", read
// as UTC).
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("no due time given: a delay such as 30m or 2h, or a time such as 2026-11-25T08:00Z")
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("due time %q: a delay cannot be negative", s)
		}
		return now.Add(d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04Z07:00", "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if at, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return at, nil
		}
	}
	return time.Time{}, fmt.Errorf("due time %q: want a delay such as 30m or 2h, or a time such as 2026-11-25T08:00Z (UTC when no zone is given)", s)
}

// maxForm caps the body of an action's POST: its form is a few short
// fields.
const maxForm = 64 << 10

// act runs the action a form POSTed to path, after the checks every
// change passes: POST, not read-only, same origin, CSRF token. It answers
// with a redirect to the queue's page (303: the browser GETs it), which
// says what was done.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, a action) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		h.fail(w, r, http.StatusMethodNotAllowed, errors.New("actions are POSTed from the dashboard's forms"))
		return
	}
	if h.readOnly {
		h.fail(w, r, http.StatusForbidden, errors.New("this dashboard is read-only"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if why := h.csrf.check(r); why != "" {
		h.fail(w, r, http.StatusForbidden, errors.New(why))
		return
	}
	queue := r.PostFormValue("q")
	insp, probe, err := h.openQueue(r, queue, a.write)
	if err != nil {
		h.fail(w, r, statusOf(err), err)
		return
	}
	n, state, err := a.run(r.Context(), insp, probe.Name, r.PostForm)
	if err != nil {
		h.fail(w, r, statusOf(err), err)
		return
	}
	done := strings.TrimPrefix(r.URL.Path, "/")
	// A relative Location, set by hand: http.Redirect would resolve it
	// against the path below the mount point and leave the mount.
	if a.overview {
		w.Header().Set("Location", link("./", "q", probe.Name, "done", done, "n", n))
	} else {
		w.Header().Set("Location", link("queue", "q", probe.Name, "state", stateName(state), "done", done, "n", n))
	}
	w.WriteHeader(http.StatusSeeOther)
}

// actionDone says what the action named in q's "done" did, in fixed
// wording: only the count comes from the query.
func actionDone(q url.Values) string {
	n, _ := strconv.Atoi(q.Get("n"))
	switch q.Get("done") {
	case "redrive":
		return fmt.Sprintf("Re-drove %d jobs: they run again at once.", n)
	case "purge":
		return fmt.Sprintf("Purged %d jobs.", n)
	case "cancel":
		return "Cancelled the timer."
	case "reschedule":
		return "Moved the timer."
	case "canceljob":
		switch q.Get("state") {
		case "ready":
			return "Cancelled the ready job: it was removed before any worker took it."
		case "delayed":
			return "Cancelled the delayed job: its timer was removed."
		case "in-flight":
			return "Cancelled the job in flight: the pool running it cancels its handler's context with cause conveyor.ErrJobCanceled " +
				"and does not retry it; if its worker died, it is removed when its lease runs out."
		}
		return "Cancelled the job."
	case "setlimit":
		if n == 0 {
			return "Removed the concurrency limit: the jobs waiting for a slot are let in at once."
		}
		return fmt.Sprintf("Set the concurrency limit to %d jobs running at once: a raised limit lets waiting jobs in at once, a lowered one takes effect as running jobs end.", n)
	case "delete":
		return fmt.Sprintf("Deleted the queue %q and its %d jobs.", q.Get("q"), n)
	case "pause":
		return "Paused the queue: workers stop fetching from it within half a second; running jobs finish."
	case "resume":
		return "Resumed the queue."
	}
	return ""
}
