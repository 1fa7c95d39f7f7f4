package dashboard

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// The browser's credentials for the dashboards of TestBrowser.
const browserUser, browserPassword = "ops", "pw-browser-test"

// TestBrowser drives the dashboard in a headless chromium, as a person
// would: the pages and links, a hostile job, a button's action, a
// forgery from another origin, and no credentials. Each subtest has its
// own key prefix, dashboard and tab; the browser is shared.
func TestBrowser(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	auth, err := BasicAuth(&Credentials{User: browserUser, Password: browserPassword})
	if err != nil {
		t.Fatal(err)
	}
	// dashboard seeds a new prefix (inspecttest's Seed) and returns it
	// with the dashboard's address as the browser sees it.
	dashboard := func(t *testing.T) (*env, string) {
		e := newEnv(t, "list", Config{Auth: auth})
		e.Seed()
		return e, e.srv.URL + mount + "/"
	}

	t.Run("Navigate", func(t *testing.T) {
		t.Parallel()
		_, base := dashboard(t)
		tb := b.tab(t, browserUser, browserPassword)
		if resp := tb.navigate(base); resp.Status != http.StatusOK {
			t.Fatalf("the overview: status %d", resp.Status)
		}
		if ch, _ := tb.seen(); len(ch) == 0 || ch[0].Scheme != "basic" || ch[0].Realm != "conveyor" {
			t.Errorf("auth challenges %+v, want one for Basic realm conveyor first", ch)
		}
		rows := evalJS[[][]string](tb, `Array.from(document.querySelectorAll("main tbody tr"), tr => Array.from(tr.cells, c => c.innerText.trim()))`)
		want := [][]string{{"work", "list", "3", "2", "2", "2", "no", "0", "2", "-", "", "Pause"}}
		if !slices.EqualFunc(rows, want, slices.Equal) {
			t.Errorf("the overview's rows = %q, want %q", rows, want)
		}
		// The stylesheet loads under the CSP, behind the same credentials.
		if n := evalJS[int](tb, `document.styleSheets.length ? document.styleSheets[0].cssRules.length : 0`); n == 0 {
			t.Error("the stylesheet did not load")
		}

		tb.click(`//main//a[.="work"]`)
		if got, want := tb.location(), base+"queue?q=work"; got != want {
			t.Errorf("the queue's page is at %s, want %s", got, want)
		}
		if got := tb.text("main h1"); got != "Queue work" {
			t.Errorf("the queue's heading = %q", got)
		}
		tabs := evalJS[[]string](tb, `Array.from(document.querySelectorAll("nav.tabs a"), a => a.innerText)`)
		if want := []string{"ready (3)", "in-flight (2)", "delayed (2)", "discarded (2)", "finished (0)"}; !slices.Equal(tabs, want) {
			t.Errorf("the queue's tabs = %q, want %q", tabs, want)
		}
		if ids := tb.cells(0); !slices.Equal(ids, []string{"r1", "r2", "r3"}) {
			t.Errorf("the ready jobs = %q, want r1 r2 r3", ids)
		}

		tb.click(`//nav[@class="tabs"]/a[starts-with(., "discarded")]`)
		if got, want := tb.location(), base+"queue?q=work&state=discarded"; got != want {
			t.Errorf("the discarded tab is at %s, want %s", got, want)
		}
		if ids := tb.cells(0); len(ids) != 2 || !slices.Contains(ids, "d1") || !slices.Contains(ids, "d2") {
			t.Errorf("the discarded jobs = %q, want d1 and d2", ids)
		}

		tb.click(`//main//a[.="d1"]`)
		if got, want := tb.location(), base+"job?id=d1&q=work&state=discarded"; got != want {
			t.Errorf("the job's page is at %s, want %s", got, want)
		}
		if got := tb.text("main h1"); got != "Job d1" {
			t.Errorf("the job's heading = %q", got)
		}
		fields := evalJS[map[string]string](tb, `Object.fromEntries(Array.from(document.querySelectorAll("table.fields tr"), tr => [tr.cells[0].innerText, tr.cells[1].innerText]))`)
		for k, v := range map[string]string{"Queue": "work", "Kind": "mail", "State": "discarded", "Reason": "boom d1"} {
			if fields[k] != v {
				t.Errorf("the job's %s = %q, want %q (all: %q)", k, fields[k], v, fields)
			}
		}
		if got := tb.text("pre.payload"); got != "{\n  \"id\": \"d1\"\n}" {
			t.Errorf("the job's payload shows %q", got)
		}
	})

	t.Run("HostileJob", func(t *testing.T) {
		t.Parallel()
		e, base := dashboard(t)
		const (
			script = `<script>window.__pwned=1</script>`
			img    = `<img src=x onerror="window.__pwned=1">`
			// A kind holds no white space: the same image, its attributes
			// parted by slashes, as an HTML parser allows.
			kind = `<img/src="x"/onerror="window.__pwned=1">`
		)
		payload := script + "\n" + img + "\n" + `<svg onload="alert('pwned')"></svg>`
		msg := &broker.Message{ID: "h1", Kind: kind, Queue: "work", Payload: []byte(payload),
			Headers: map[string]string{"x-note": script + img}, EnqueuedAt: time.Now()}
		if err := e.d.Enqueue(e.ctx, []*broker.Message{msg}); err != nil {
			t.Fatal(err)
		}
		tb := b.tab(t, browserUser, browserPassword)
		// Nothing the job holds became an element or ran: no script, image
		// or svg in the page's main part but the dashboard's own charts, no
		// __pwned, no dialog.
		harmless := func(page string) {
			t.Helper()
			if n := evalJS[int](tb, `document.querySelectorAll("main script, main img, main svg:not(figure.chart > svg):not(svg.spark)").length`); n != 0 {
				t.Errorf("%s: the job's fields made %d elements", page, n)
			}
			if got := evalJS[string](tb, `typeof window.__pwned`); got != "undefined" {
				t.Errorf("%s: window.__pwned is %s: the job's fields ran as script", page, got)
			}
			if _, dialogs := tb.seen(); len(dialogs) > 0 {
				t.Errorf("%s: dialogs opened: %q", page, dialogs)
			}
		}

		if resp := tb.navigate(base + "queue?q=work&state=ready"); resp.Status != http.StatusOK {
			t.Fatalf("the queue: status %d", resp.Status)
		}
		harmless("the queue's page")
		if kinds := tb.cells(1); !slices.Contains(kinds, kind) {
			t.Errorf("the queue's kinds = %q, want the literal %q among them", kinds, kind)
		}

		tb.click(`//main//a[.="h1"]`)
		harmless("the job's page")
		if got := tb.text("pre.payload"); got != payload {
			t.Errorf("the payload shows %q, want the literal %q", got, payload)
		}
		fields := evalJS[map[string]string](tb, `Object.fromEntries(Array.from(document.querySelectorAll("table.fields tr"), tr => [tr.cells[0].innerText, tr.cells[1].innerText]))`)
		if fields["Kind"] != kind || fields["x-note"] != script+img {
			t.Errorf("the kind shows %q and the header %q; want the literal %q and %q", fields["Kind"], fields["x-note"], kind, script+img)
		}
		body := evalJS[string](tb, `document.body.innerText`)
		for _, s := range []string{script, img, kind} {
			if !strings.Contains(body, s) {
				t.Errorf("the job's page lacks the text %q:\n%s", s, body)
			}
		}

		// A finished job's record: its error a script, its result JSON.
		// Queue "done" has no other job for the pool to run.
		e.SeedFinished("done")
		if resp := tb.navigate(base + "queue?q=done"); resp.Status != http.StatusOK {
			t.Fatalf("the queue done: status %d", resp.Status)
		}
		tb.click(`//nav[@class="tabs"]/a[.="finished (2)"]`)
		if got, want := tb.location(), base+"queue?q=done&state=finished"; got != want {
			t.Errorf("the finished tab is at %s, want %s", got, want)
		}
		harmless("the finished jobs")
		ids, outcomes, errs := tb.cells(0), tb.cells(4), tb.cells(5)
		slices.Sort(ids)
		if !slices.Equal(ids, []string{"bad1", "ok1"}) || !slices.Contains(outcomes, "discarded") || !slices.Contains(errs, finishedError) {
			t.Errorf("the finished jobs = %q, outcomes %q, errors %q; want ok1 and bad1, bad1 discarded with the literal %q",
				ids, outcomes, errs, finishedError)
		}
		if got := evalJS[[]string](tb, `Array.from(document.querySelectorAll("main form[method=post]"), f => f.getAttribute("action"))`); !slices.Equal(got, []string{"pause", "setlimit", "delete"}) {
			t.Errorf("the finished tab's forms POST to %q, want the queue's pause, limit and delete alone (no purge, no per-job action)", got)
		}
		tb.click(`//main//a[.="bad1"]`)
		harmless("the finished job's page")
		fields = evalJS[map[string]string](tb, `Object.fromEntries(Array.from(document.querySelectorAll("table.fields tr"), tr => [tr.cells[0].innerText, tr.cells[1].innerText]))`)
		for k, v := range map[string]string{"State": "finished", "Outcome": "discarded", "Error": finishedError} {
			if fields[k] != v {
				t.Errorf("the finished job's %s = %q, want %q (all: %q)", k, fields[k], v, fields)
			}
		}
		if got, want := tb.text("pre.payload"), "{\n  \"invoice\": \"INV-2\",\n  \"lines\": [\n    1,\n    2\n  ]\n}"; got != want {
			t.Errorf("the finished job's result shows %q, want %q", got, want)
		}
		heads := evalJS[[]string](tb, `Array.from(document.querySelectorAll("main h2"), h => h.innerText)`)
		if forms := evalJS[int](tb, `document.forms.length`); !slices.Equal(heads, []string{"Result"}) || forms != 0 {
			t.Errorf("the finished job's page has sections %q and %d forms; want the result alone and no form", heads, forms)
		}
	})

	t.Run("RedriveButton", func(t *testing.T) {
		t.Parallel()
		e, base := dashboard(t)
		tb := b.tab(t, browserUser, browserPassword)
		if resp := tb.navigate(base + "queue?q=work&state=discarded"); resp.Status != http.StatusOK {
			t.Fatalf("the discarded jobs: status %d", resp.Status)
		}
		// The button of d1's row: its form carries the page's CSRF token.
		tb.click(`//main//tr[td[1]="d1"]//button[.="Re-drive"]`)
		if got, want := tb.location(), base+"queue?done=redrive&n=1&q=work&state=discarded"; got != want {
			t.Errorf("after the re-drive the browser is at %s, want %s", got, want)
		}
		if got := tb.text("p.done"); got != "Re-drove 1 jobs: they run again at once." {
			t.Errorf("the page says %q after the re-drive", got)
		}
		if ids := tb.cells(0); !slices.Equal(ids, []string{"d2"}) {
			t.Errorf("the discarded jobs after the re-drive = %q, want d2 alone", ids)
		}
		if j, err := e.insp.Job(e.ctx, "work", "d1", conveyor.JobReady); err != nil || j.ID != "d1" {
			t.Errorf("d1 is not ready after its re-drive: %v, %v", j, err)
		}
		if got := e.sizes("work"); got.Ready != 4 || got.Discarded != 1 {
			t.Errorf("after the re-drive: ready %d discarded %d, want 4 and 1", got.Ready, got.Discarded)
		}
		tb.click(`//nav[@class="tabs"]/a[starts-with(., "ready")]`)
		if ids := tb.cells(0); !slices.Contains(ids, "d1") || len(ids) != 4 {
			t.Errorf("the ready jobs after the re-drive = %q, want r1 r2 r3 and d1", ids)
		}
	})

	t.Run("CrossSiteForgery", func(t *testing.T) {
		t.Parallel()
		e, base := dashboard(t)
		tb := b.tab(t, browserUser, browserPassword)
		// The victim has the dashboard open: the browser holds its CSRF
		// cookie and the credential, and sends both to it from any page.
		if resp := tb.navigate(base + "job?id=d1&q=work&state=discarded"); resp.Status != http.StatusOK {
			t.Fatalf("the job's page: status %d", resp.Status)
		}
		token, err := chromedp.Run(tb.ctx, chromedp.Value(chromedp.CSS(`form[action="redrive"] input[name="csrf"]`)))
		if err != nil || token == "" {
			t.Fatalf("the job's page has no CSRF token: %q, %v", token, err)
		}
		// The attacker's page, on another origin: a form re-driving d1
		// that posts itself once loaded; ?token= adds a leaked token.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fields := `<input name="q" value="work"><input name="id" value="d1">`
			if tok := r.URL.Query().Get("token"); tok != "" {
				fields += `<input name="csrf" value="` + html.EscapeString(tok) + `">`
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><title>Win a prize</title><body onload="document.forms[0].submit()"><form method="post" action="%s">%s</form></body>`,
				html.EscapeString(base+"redrive"), fields)
		}))
		t.Cleanup(evil.Close)

		for _, c := range []struct{ name, query, why string }{
			{"no token", "", ""},
			// Only the Origin check stands in the way of this one.
			{"leaked token", "?token=" + url.QueryEscape(token), "cross-origin request"},
		} {
			responses := chromedp.Events(tb.ctx, network.ResponseReceived)
			tb.navigate(evil.URL + c.query)
			// The first page from elsewhere than the attacker's is where the
			// forged POST led (after a redirect, had it been obeyed).
			var resp *network.Response
			for ev, err := range responses {
				if err != nil {
					t.Fatalf("%s: the forged form's POST got no answer: %v", c.name, err)
				}
				if ev.Type == network.ResourceTypeDocument && !strings.HasPrefix(ev.Response.URL, evil.URL) {
					resp = ev.Response
					break
				}
			}
			if resp == nil {
				t.Fatalf("%s: the forged form's POST got no answer", c.name)
			}
			if resp.URL != base+"redrive" || resp.Status != http.StatusForbidden {
				t.Errorf("%s: the forged POST led to %s, status %d; want a 403 from %s", c.name, resp.URL, resp.Status, base+"redrive")
				continue
			}
			if err := chromedp.Do(tb.ctx, chromedp.WaitVisible(chromedp.CSS("p.error"))); err != nil {
				t.Fatalf("%s: no refusal page: %v", c.name, err)
			}
			heading, why := tb.text("main h1"), tb.text("p.error")
			if heading != "Forbidden" || !strings.Contains(why, c.why) {
				t.Errorf("%s: the refusal page says %q: %q; want Forbidden, saying %q", c.name, heading, why, c.why)
			}
			t.Logf("%s: refused with %d: %s", c.name, resp.Status, why)
		}
		if _, err := e.insp.Job(e.ctx, "work", "d1", conveyor.JobDiscarded); err != nil {
			t.Errorf("d1 is no longer discarded after the forgeries: %v", err)
		}
		if got := e.sizes("work"); got.Ready != 3 || got.Discarded != 2 {
			t.Errorf("after the forgeries: ready %d discarded %d, want 3 and 2 as seeded", got.Ready, got.Discarded)
		}
	})

	t.Run("NoCredentials", func(t *testing.T) {
		t.Parallel()
		e, base := dashboard(t)
		tb := b.tab(t, "", "")
		paths := []string{"", "queue?q=work&state=discarded", "job?id=d1&q=work&state=discarded"}
		for _, path := range paths {
			resp := tb.navigate(base + path)
			body := evalJS[string](tb, `document.body.innerText`)
			if resp.Status != http.StatusUnauthorized || !strings.Contains(body, "401 unauthorized") {
				t.Errorf("%q without credentials: status %d, page %q; want 401", path, resp.Status, body)
			}
			for _, data := range []string{e.prefix, "work", "d1", "boom", "Queues"} {
				if strings.Contains(body, data) {
					t.Errorf("%q without credentials shows %q:\n%s", path, data, body)
				}
			}
		}
		// The browser asked for credentials for each page, and was
		// answered with Cancel.
		ch, _ := tb.seen()
		if len(ch) < len(paths) {
			t.Errorf("%d auth challenges, want one a page at least", len(ch))
		}
		for _, c := range ch {
			if c.Scheme != "basic" || c.Realm != "conveyor" {
				t.Errorf("auth challenge %+v, want Basic realm conveyor", c)
			}
		}
		cookies, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base}})
		if err != nil {
			t.Fatal(err)
		}
		if len(cookies.Cookies) != 0 {
			t.Errorf("pages refused for want of credentials set cookies: %+v", cookies.Cookies)
		}
	})
}
