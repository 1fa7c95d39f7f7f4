package dashboard

import (
	"context"
	"errors"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// postedTo POSTs form to action with s's token from the dashboard's own
// origin and fails the test unless it is answered 303 to location.
func (e *env) postedTo(action string, s session, form url.Values, location string) {
	e.t.Helper()
	a := e.post(action, s, e.srv.URL, form)
	if a.status != http.StatusSeeOther || a.header.Get("Location") != location {
		e.t.Fatalf("POST %s %v: status %d, Location %q; want 303 to %q\n%s", action, form, a.status, a.header.Get("Location"), location, a.body)
	}
}

// limits reads queue's concurrency limits straight from the Inspector.
func (e *env) limits(queue string) []broker.Limit {
	e.t.Helper()
	ls, err := e.insp.Limits(e.ctx, queue)
	if err != nil {
		e.t.Fatal(err)
	}
	return ls
}

// gone fails the test unless no state of queue holds the job id.
func (e *env) gone(queue, id string) {
	e.t.Helper()
	if j, err := e.insp.Job(e.ctx, queue, id); !errors.Is(err, conveyor.ErrJobNotFound) {
		e.t.Errorf("job %s of %s after its cancel: %+v, %v; want it gone", id, queue, j, err)
	}
}

// receive waits up to 10s for a value from c.
func receive[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
	}
	var zero T
	return zero
}

// TestCancelJobAction cancels a ready, a delayed, an in-flight job and one
// waiting in a FIFO group's line, each from its job page's or the queue
// page's form, and checks each effect in Redis; it answers 404 for a job
// no state it reaches holds and 400 without an ID.
func TestCancelJobAction(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		e.Seed()
		s := e.session()

		// The pages of the jobs CancelJob reaches have its button; a
		// discarded job's has none.
		for _, id := range []string{"r1", "f1", "t1"} {
			contains(t, "job "+id, e.get("job?q=work&id="+id, http.StatusOK).body,
				`<form method="post" action="canceljob"><input type="hidden" name="csrf" value="`,
				`<input type="hidden" name="q" value="work"><input type="hidden" name="id" value="`+id+`"><button class="danger">Cancel this job</button>`,
				"cause <code>conveyor.ErrJobCanceled</code>", "the job is not retried")
		}
		lacks(t, "job d1", e.get("job?q=work&id=d1", http.StatusOK).body, `action="canceljob"`)
		// So do the queue's tabs of those states, by ID.
		for _, state := range []string{"ready", "in-flight", "delayed"} {
			contains(t, state+" tab", e.get("queue?q=work&state="+state, http.StatusOK).body,
				"<h2>Cancel a job by ID</h2>", `<form method="post" action="canceljob">`, `<label>Job ID <input name="id" required`)
		}
		for _, state := range []string{"discarded", "finished"} {
			lacks(t, state+" tab", e.get("queue?q=work&state="+state, http.StatusOK).body, `action="canceljob"`)
		}

		// Ready: removed; the browser goes to the ready tab.
		e.postedTo("canceljob", s, s.form("work", "id", "r1"), "queue?done=canceljob&n=1&q=work&state=ready")
		e.gone("work", "r1")
		if got := e.sizes("work"); got.Ready != 2 || got.InFlight != 2 || got.Delayed != 2 || got.Discarded != 2 {
			t.Errorf("after the cancel of r1: %+v, want 2 of each state", got)
		}
		contains(t, "the page after the cancel of r1", e.get("queue?done=canceljob&n=1&q=work&state=ready", http.StatusOK).body,
			"Cancelled the ready job: it was removed before any worker took it.")

		// Delayed: its timer is removed.
		e.postedTo("canceljob", s, s.form("work", "id", " t1 "), "queue?done=canceljob&n=1&q=work&state=delayed")
		e.gone("work", "t1")
		if got := e.sizes("work").Delayed; got != 1 {
			t.Errorf("delayed after the cancel of t1 = %d, want 1", got)
		}
		contains(t, "the page after the cancel of t1", e.get("queue?done=canceljob&n=1&q=work&state=delayed", http.StatusOK).body,
			"Cancelled the delayed job: its timer was removed.")

		// In flight: the delivery held here is marked, and its holder
		// learns of it at its next lease extension.
		e.Enqueue("held", "mail", "h1", nil)
		c, ds := e.Fetch("held", 1)
		e.postedTo("canceljob", s, s.form("held", "id", "h1"), "queue?done=canceljob&n=1&q=held&state=in-flight")
		if err := c.Extend(e.ctx, time.Minute, ds[0]); !errors.Is(err, conveyor.ErrJobCanceled) {
			t.Errorf("the extension of h1's lease after its cancel: %v, want conveyor.ErrJobCanceled", err)
		}
		contains(t, "the page after the cancel of h1", e.get("queue?done=canceljob&n=1&q=held&state=in-flight", http.StatusOK).body,
			"Cancelled the job in flight: the pool running it cancels its handler&#39;s context with cause conveyor.ErrJobCanceled and does not retry it")

		// Waiting in its FIFO group's line behind g1: reported ready, and
		// taken out of the line.
		e.Enqueue("grp", "mail", "g1", &conveyor.EnqueueOptions{Group: "G"})
		e.Enqueue("grp", "mail", "g2", &conveyor.EnqueueOptions{Group: "G"})
		if got := e.sizes("grp"); got.Ready != 1 || got.Grouped != 1 {
			t.Fatalf("the group: ready %d, in line %d; want 1 and 1", got.Ready, got.Grouped)
		}
		e.postedTo("canceljob", s, s.form("grp", "id", "g2"), "queue?done=canceljob&n=1&q=grp&state=ready")
		if got := e.sizes("grp"); got.Ready != 1 || got.Grouped != 0 {
			t.Errorf("the group after the cancel of g2: ready %d, in line %d; want 1 and 0", got.Ready, got.Grouped)
		}
		if _, err := e.insp.Job(e.ctx, "grp", "g1", conveyor.JobReady); err != nil {
			t.Errorf("g1 after the cancel of g2: %v, want it ready", err)
		}

		// Nothing it reaches holds these: cancelled already, discarded,
		// never was. None changes anything.
		before := e.sizes("work")
		for _, id := range []string{"r1", "d1", "nosuch"} {
			a := e.post("canceljob", s, e.srv.URL, s.form("work", "id", id))
			if a.status != http.StatusNotFound || !strings.Contains(html.UnescapeString(a.body), `job "`+id+`" not found in queue "work": no job with this ID is delayed, ready or in flight`) {
				t.Errorf("cancel of %s: status %d, want 404 saying so\n%s", id, a.status, a.body)
			}
		}
		a := e.post("canceljob", s, e.srv.URL, s.form("work", "id", " "))
		if a.status != http.StatusBadRequest || !strings.Contains(a.body, "no job ID given") {
			t.Errorf("cancel without an ID: status %d, want 400\n%s", a.status, a.body)
		}
		if got := e.sizes("work"); *got != *before {
			t.Errorf("refused cancels changed the queue: %+v, was %+v", got, before)
		}
		if _, err := e.insp.Job(e.ctx, "work", "d1", conveyor.JobDiscarded); err != nil {
			t.Errorf("d1 after a refused cancel: %v, want it discarded", err)
		}
	})
}

// TestCancelJobActionRunning cancels a job a worker pool runs: its
// handler's context ends with cause conveyor.ErrJobCanceled, its outcome
// is canceled, and it is not retried.
func TestCancelJobActionRunning(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		started := make(chan string, 2)
		cause := make(chan error, 2)
		finished := make(chan conveyor.Outcome, 2)
		mux := worker.NewMux()
		mux.HandleFunc("slow", func(ctx context.Context, job *conveyor.Job) error {
			started <- job.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
		observe := func(next conveyor.Handler) conveyor.Handler {
			return conveyor.HandlerFunc(func(ctx context.Context, job *conveyor.Job) error {
				job.OnFinish(func(s conveyor.Settlement) { finished <- s.Outcome })
				return next.ProcessJob(ctx, job)
			})
		}
		p, err := worker.NewPool(e.d, mux, &worker.Config{Queue: "run", RegistryInterval: -1,
			Middleware: []conveyor.Middleware{observe}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		stop := drivertest.Background(t, p.Run)
		defer stop()
		e.Enqueue("run", "slow", "s1", &conveyor.EnqueueOptions{MaxAttempts: 5})
		if id := receive(t, "s1 to start", started); id != "s1" {
			t.Fatalf("%s started, want s1", id)
		}

		s := e.session()
		e.postedTo("canceljob", s, s.form("run", "id", "s1"), "queue?done=canceljob&n=1&q=run&state=in-flight")
		if err := receive(t, "the handler's context to end", cause); !errors.Is(err, conveyor.ErrJobCanceled) {
			t.Errorf("the handler's context ended with cause %v, want conveyor.ErrJobCanceled", err)
		}
		if o := receive(t, "s1 to finish", finished); o != conveyor.OutcomeCanceled {
			t.Errorf("s1 finished %v, want %v", o, conveyor.OutcomeCanceled)
		}
		redistest.Eventually(t, "s1 to leave the queue", func() bool {
			got := e.sizes("run")
			return got.Ready+got.InFlight+got.Delayed+got.Discarded == 0
		})
		stop()
		if len(started) != 0 {
			t.Errorf("s1 ran again after its cancel: %s started", <-started)
		}
	})
}

// TestSetLimitAction sets, changes and removes a queue's and a kind's
// limits from the queue page's forms, checks each in Redis, refuses bad
// values with 400 and shows a hostile kind as text.
func TestSetLimitAction(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		e.Seed()
		s := e.session()
		a := e.get("queue?q=work", http.StatusOK)
		contains(t, "the queue page without limits", a.body, "<h2>Set a concurrency limit</h2>", `<form method="post" action="setlimit">`,
			`<label>Kind <input name="kind"`, `<input name="max" type="number" min="0" required>`)
		lacks(t, "the queue page without limits", a.body, "Concurrency limits", "<button>Remove</button>")

		e.postedTo("setlimit", s, s.form("work", "kind", "mail", "max", "3"), "queue?done=setlimit&n=3&q=work&state=ready")
		e.postedTo("setlimit", s, s.form("work", "kind", "", "max", "50"), "queue?done=setlimit&n=50&q=work&state=ready")
		want := []broker.Limit{{Kind: "", Max: 50}, {Kind: "mail", Max: 3}}
		if got := e.limits("work"); !slices.Equal(got, want) {
			t.Fatalf("limits after setting two = %+v, want %+v", got, want)
		}
		contains(t, "the page after a set", e.get("queue?done=setlimit&n=3&q=work&state=ready", http.StatusOK).body,
			"Set the concurrency limit to 3 jobs running at once")
		e.postedTo("setlimit", s, s.form("work", "kind", " mail ", "max", "1"), "queue?done=setlimit&n=1&q=work&state=ready")
		want[1].Max = 1
		if got := e.limits("work"); !slices.Equal(got, want) {
			t.Errorf("limits after lowering mail's = %+v, want %+v", got, want)
		}

		// Each row has its remove button, which posts max 0 for its kind.
		a = e.get("queue?q=work", http.StatusOK)
		contains(t, "the queue page with limits", a.body, "<h2>Concurrency limits</h2>",
			`<td class="num">0</td><td><form method="post" action="setlimit">`,
			`<input type="hidden" name="q" value="work"><input type="hidden" name="kind" value=""><input type="hidden" name="max" value="0"><button>Remove</button></form>`,
			`<input type="hidden" name="q" value="work"><input type="hidden" name="kind" value="mail"><input type="hidden" name="max" value="0"><button>Remove</button></form>`)

		for _, c := range []struct{ kind, max, why string }{
			{"mail", "", "no limit given: a number of jobs from 1 to 1000000, or 0 to remove the limit"},
			{"mail", "three", `max "three": want a number from 0 to 1000000`},
			{"mail", "2.5", `max "2.5": want a number from 0 to 1000000`},
			{"mail", "-1", `max "-1": want a number from 0 to 1000000`},
			{"mail", "1000001", `max "1000001": want a number from 0 to 1000000`},
			{"two words", "2", `invalid limit: kind "two words"`},
		} {
			a := e.post("setlimit", s, e.srv.URL, s.form("work", "kind", c.kind, "max", c.max))
			if a.status != http.StatusBadRequest || !strings.Contains(html.UnescapeString(a.body), c.why) {
				t.Errorf("set limit of kind %q to %q: status %d, want 400 saying %q\n%s", c.kind, c.max, a.status, c.why, a.body)
			}
		}
		if got := e.limits("work"); !slices.Equal(got, want) {
			t.Errorf("limits after refused sets = %+v, want %+v", got, want)
		}

		// A kind is shown, and sent back by its remove button, as text.
		const hostile = `<b>"x"</b>`
		e.postedTo("setlimit", s, s.form("work", "kind", hostile, "max", "2"), "queue?done=setlimit&n=2&q=work&state=ready")
		a = e.get("queue?q=work", http.StatusOK)
		contains(t, "the queue page with a hostile kind", a.body,
			`<td>&lt;b&gt;&#34;x&#34;&lt;/b&gt;</td>`, `<input type="hidden" name="kind" value="&lt;b&gt;&#34;x&#34;&lt;/b&gt;">`)
		lacks(t, "the queue page with a hostile kind", a.body, hostile, "<b>")

		// Removed: 0.
		for _, kind := range []string{hostile, "mail", ""} {
			e.postedTo("setlimit", s, s.form("work", "kind", kind, "max", "0"), "queue?done=setlimit&n=0&q=work&state=ready")
		}
		if got := e.limits("work"); len(got) != 0 {
			t.Errorf("limits after removing them all = %+v, want none", got)
		}
		a = e.get("queue?done=setlimit&n=0&q=work&state=ready", http.StatusOK)
		contains(t, "the page after the removals", a.body, "Removed the concurrency limit: the jobs waiting for a slot are let in at once.")
		lacks(t, "the page after the removals", a.body, "<h2>Concurrency limits</h2>", "<button>Remove</button>")
	})
}

// TestJobActionsRefused: a read-only dashboard shows neither action's
// form and refuses both with 403; a writable one refuses them without the
// CSRF token or from another origin, and on a GET. None changes Redis.
func TestJobActionsRefused(t *testing.T) {
	t.Parallel()
	ro := newEnv(t, "list", Config{ReadOnly: true})
	ro.Seed()
	if err := ro.insp.SetLimit(ro.ctx, "work", "mail", 3); err != nil {
		t.Fatal(err)
	}
	want := []broker.Limit{{Kind: "mail", Max: 3}}
	for _, page := range []string{"queue?q=work", "queue?q=work&state=in-flight", "queue?q=work&state=delayed", "job?q=work&id=r1", "job?q=work&id=f1", "job?q=work&id=t1"} {
		a := ro.get(page, http.StatusOK)
		lacks(t, "read-only page "+page, a.body, `action="canceljob"`, `action="setlimit"`, "Cancel this job", "Cancel a job by ID",
			"Set a concurrency limit", "<button>Remove</button>", `name="csrf"`)
	}
	contains(t, "the read-only queue page", ro.get("queue?q=work", http.StatusOK).body,
		"<h2>Concurrency limits</h2>", `<td class="num">3</td><td class="num">0</td><td class="num">0</td></tr>`)
	for action, form := range map[string]url.Values{
		"canceljob": {"q": {"work"}, "id": {"r1"}},
		"setlimit":  {"q": {"work"}, "kind": {"mail"}, "max": {"0"}},
	} {
		if a := ro.post(action, session{}, ro.srv.URL, form); a.status != http.StatusForbidden || !strings.Contains(a.body, "read-only") {
			t.Errorf("POST %s to a read-only dashboard: status %d, want 403\n%s", action, a.status, a.body)
		}
	}
	if _, err := ro.insp.Job(ro.ctx, "work", "r1", conveyor.JobReady); err != nil {
		t.Errorf("r1 after a refused cancel: %v, want it ready", err)
	}
	if got := ro.limits("work"); !slices.Equal(got, want) {
		t.Errorf("limits after a refused remove = %+v, want %+v", got, want)
	}

	e := newEnv(t, "list", Config{})
	e.Seed()
	if err := e.insp.SetLimit(e.ctx, "work", "mail", 3); err != nil {
		t.Fatal(err)
	}
	s := e.session()
	for action, pairs := range map[string][]string{"canceljob": {"id", "r1"}, "setlimit": {"kind", "mail", "max", "0"}} {
		noToken := s.form("work", pairs...)
		noToken.Del("csrf")
		for _, c := range []struct {
			name, origin, why string
			form              url.Values
		}{
			{"no token", e.srv.URL, "CSRF token", noToken},
			{"cross-origin", "https://evil.example", "cross-origin", s.form("work", pairs...)},
		} {
			if a := e.post(action, s, c.origin, c.form); a.status != http.StatusForbidden || !strings.Contains(a.body, c.why) {
				t.Errorf("POST %s with %s: status %d, want 403 saying %q\n%s", action, c.name, a.status, c.why, a.body)
			}
		}
		e.get(action+"?"+s.form("work", pairs...).Encode(), http.StatusMethodNotAllowed)
	}
	if _, err := e.insp.Job(e.ctx, "work", "r1", conveyor.JobReady); err != nil {
		t.Errorf("r1 after refused cancels: %v, want it ready", err)
	}
	if got := e.limits("work"); !slices.Equal(got, want) {
		t.Errorf("limits after refused removes = %+v, want %+v", got, want)
	}
}

// TestBrowserJobActions clicks, in a headless chromium, a job page's
// cancel button, the queue page's cancel by ID, its limit form and a
// limit's remove button, and checks each effect on the page and in Redis.
func TestBrowserJobActions(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	auth, err := BasicAuth(&Credentials{User: browserUser, Password: browserPassword})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "list", Config{Auth: auth})
	e.Seed()
	base := e.srv.URL + mount + "/"
	tb := b.tab(t, browserUser, browserPassword)

	if resp := tb.navigate(base + "job?id=r1&q=work&state=ready"); resp.Status != http.StatusOK {
		t.Fatalf("r1's page: status %d", resp.Status)
	}
	tb.click(`//main//button[.="Cancel this job"]`)
	if got, want := tb.location(), base+"queue?done=canceljob&n=1&q=work&state=ready"; got != want {
		t.Errorf("after the cancel the browser is at %s, want %s", got, want)
	}
	if got := tb.text("p.done"); got != "Cancelled the ready job: it was removed before any worker took it." {
		t.Errorf("the page says %q after the cancel", got)
	}
	if ids := tb.cells(0); !slices.Equal(ids, []string{"r2", "r3"}) {
		t.Errorf("the ready jobs after the cancel of r1 = %q, want r2 r3", ids)
	}
	e.gone("work", "r1")

	// By ID, from the delayed tab.
	if resp := tb.navigate(base + "queue?q=work&state=delayed"); resp.Status != http.StatusOK {
		t.Fatalf("the delayed tab: status %d", resp.Status)
	}
	const byID = `//main//section[h2="Cancel a job by ID"]`
	if err := chromedp.Do(tb.ctx, chromedp.SendKeys(chromedp.Search(byID+`//input[@name="id"]`), "t2")); err != nil {
		t.Fatal(err)
	}
	tb.click(byID + `//button`)
	if got, want := tb.location(), base+"queue?done=canceljob&n=1&q=work&state=delayed"; got != want {
		t.Errorf("after the cancel by ID the browser is at %s, want %s", got, want)
	}
	if ids := tb.cells(0); !slices.Equal(ids, []string{"t1"}) {
		t.Errorf("the delayed jobs after the cancel of t2 = %q, want t1", ids)
	}
	e.gone("work", "t2")

	// A limit set from the form, then removed from its row.
	if resp := tb.navigate(base + "queue?q=work"); resp.Status != http.StatusOK {
		t.Fatalf("the queue: status %d", resp.Status)
	}
	const set = `//main//section[h2="Set a concurrency limit"]`
	if err := chromedp.Do(tb.ctx,
		chromedp.SendKeys(chromedp.Search(set+`//input[@name="kind"]`), "mail"),
		chromedp.SendKeys(chromedp.Search(set+`//input[@name="max"]`), "2")); err != nil {
		t.Fatal(err)
	}
	tb.click(set + `//button[.="Set limit"]`)
	if got, want := tb.location(), base+"queue?done=setlimit&n=2&q=work&state=ready"; got != want {
		t.Errorf("after setting the limit the browser is at %s, want %s", got, want)
	}
	if got, want := e.limits("work"), []broker.Limit{{Kind: "mail", Max: 2}}; !slices.Equal(got, want) {
		t.Errorf("limits after the form = %+v, want %+v", got, want)
	}
	rows := evalJS[[][]string](tb, `Array.from(document.querySelectorAll("table.limits tbody tr"), tr => Array.from(tr.cells, c => c.innerText.trim()))`)
	if want := [][]string{{"mail", "2", "0", "0", "Remove"}}; !slices.EqualFunc(rows, want, slices.Equal) {
		t.Errorf("the limits' rows = %q, want %q", rows, want)
	}
	tb.click(`//table[@class="limits"]//tr[td[1]="mail"]//button[.="Remove"]`)
	if got, want := tb.location(), base+"queue?done=setlimit&n=0&q=work&state=ready"; got != want {
		t.Errorf("after removing the limit the browser is at %s, want %s", got, want)
	}
	if got := e.limits("work"); len(got) != 0 {
		t.Errorf("limits after the remove button = %+v, want none", got)
	}
	if n := evalJS[int](tb, `document.querySelectorAll("table.limits").length`); n != 0 {
		t.Errorf("the page shows %d limits tables after the last limit's removal, want none", n)
	}
}
