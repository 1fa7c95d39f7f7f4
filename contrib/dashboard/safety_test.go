package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// TestActions re-drives, purges, cancels, pauses and resumes with the
// token, and checks each effect in Redis.
func TestActions(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		e.Seed()
		s := e.session()
		origin := e.srv.URL
		posted := func(action string, form url.Values, wantLocation string) {
			t.Helper()
			a := e.post(action, s, origin, form)
			if a.status != http.StatusSeeOther || a.header.Get("Location") != wantLocation {
				t.Fatalf("POST %s: status %d, Location %q; want 303 to %q\n%s", action, a.status, a.header.Get("Location"), wantLocation, a.body)
			}
		}

		posted("redrive", s.form("work", "kind", "sms"), "queue?done=redrive&n=1&q=work&state=discarded")
		if got := e.sizes("work"); got.Discarded != 1 || got.Ready != 4 {
			t.Errorf("after re-drive of kind sms: discarded %d ready %d, want 1 and 4", got.Discarded, got.Ready)
		}
		if _, err := e.insp.Job(e.ctx, "work", "d2", conveyor.JobReady); err != nil {
			t.Errorf("d2 is not ready after its re-drive: %v", err)
		}
		contains(t, "the page after the re-drive", e.get("queue?done=redrive&n=1&q=work&state=discarded", http.StatusOK).body,
			"Re-drove 1 jobs: they run again at once.")

		// Reschedule t2 (due in 2h) to 3h from now, then to a time.
		posted("reschedule", s.form("work", "id", "t2", "at", "3h"), "queue?done=reschedule&n=1&q=work&state=delayed")
		if j, err := e.insp.Job(e.ctx, "work", "t2", conveyor.JobDelayed); err != nil || j.RunAt.Before(time.Now().Add(3*time.Hour-time.Minute)) {
			t.Errorf("t2 after its reschedule to 3h: %+v, %v", j, err)
		}
		at := time.Now().Add(5 * time.Hour).UTC().Truncate(time.Minute)
		// A due time travels as a wait from the server's clock (so skewed
		// clocks agree), so it lands late by up to the request's own time.
		sent := time.Now()
		posted("reschedule", s.form("work", "id", "t2", "at", at.Format("2006-01-02T15:04")), "queue?done=reschedule&n=1&q=work&state=delayed")
		slack := time.Since(sent) + 10*time.Millisecond
		if j, err := e.insp.Job(e.ctx, "work", "t2", conveyor.JobDelayed); err != nil || j.RunAt.Sub(at).Abs() > slack {
			t.Errorf("t2 after its reschedule to %v: %+v, %v (want within %v)", at, j, err, slack)
		}
		for _, bad := range []string{"", "-5m", "tomorrow"} {
			if a := e.post("reschedule", s, origin, s.form("work", "id", "t2", "at", bad)); a.status != http.StatusBadRequest {
				t.Errorf("reschedule to %q: status %d, want 400", bad, a.status)
			}
		}
		if a := e.post("reschedule", s, origin, s.form("work", "id", "nosuch", "at", "1h")); a.status != http.StatusNotFound {
			t.Errorf("reschedule of a timer that is not there: status %d, want 404", a.status)
		}
		contains(t, "the page after a reschedule", e.get("queue?done=reschedule&n=1&q=work&state=delayed", http.StatusOK).body,
			"Moved the timer.")

		posted("cancel", s.form("work", "id", "t1"), "queue?done=cancel&n=1&q=work&state=delayed")
		if _, err := e.insp.Job(e.ctx, "work", "t1"); err == nil {
			t.Error("timer t1 is still there after its cancel")
		}
		if got := e.sizes("work").Delayed; got != 1 {
			t.Errorf("delayed after the cancel = %d, want 1", got)
		}
		if a := e.post("cancel", s, origin, s.form("work", "id", "t1")); a.status != http.StatusNotFound {
			t.Errorf("a second cancel of t1: status %d, want 404", a.status)
		}

		if a := e.post("purge", s, origin, s.form("work", "state", "ready")); a.status != http.StatusBadRequest {
			t.Errorf("purge without the confirm box: status %d, want 400", a.status)
		}
		posted("purge", s.form("work", "state", "ready", "max", "3", "confirm", "yes"), "queue?done=purge&n=3&q=work&state=ready")
		if got := e.sizes("work").Ready; got != 1 {
			t.Errorf("ready after purging 3 of 4 = %d, want 1", got)
		}
		if a := e.post("purge", s, origin, s.form("work", "state", "in-flight", "confirm", "yes")); a.status != http.StatusBadRequest {
			t.Errorf("purge of in-flight jobs: status %d, want 400", a.status)
		}
		if a := e.post("purge", s, origin, s.form("work", "state", "finished", "confirm", "yes")); a.status != http.StatusBadRequest ||
			!strings.Contains(a.body, "retention drops them") {
			t.Errorf("purge of finished jobs: status %d, want 400 saying retention drops them\n%s", a.status, a.body)
		}

		posted("pause", s.form("work"), "queue?done=pause&n=0&q=work&state=ready")
		if paused, err := e.insp.Paused(e.ctx, "work"); err != nil || !paused {
			t.Errorf("after pause: paused %v, %v", paused, err)
		}
		contains(t, "overview of a paused queue", e.get("", http.StatusOK).body, `<span class="badge">paused</span>`, `action="resume"`)
		posted("resume", s.form("work"), "queue?done=resume&n=0&q=work&state=ready")
		if paused, err := e.insp.Paused(e.ctx, "work"); err != nil || paused {
			t.Errorf("after resume: paused %v, %v", paused, err)
		}

		// Delete: the name must be typed; jobs in flight (f1, f2) stop it
		// unless the box is ticked.
		contains(t, "the queue page's delete form", e.get("queue?q=work", http.StatusOK).body, `action="delete"`, `name="confirm"`)
		before := e.sizes("work")
		if a := e.post("delete", s, origin, s.form("work", "confirm", "wrok")); a.status != http.StatusBadRequest || !strings.Contains(a.body, "type the queue") {
			t.Errorf("delete with a mistyped name: status %d, want 400\n%s", a.status, a.body)
		}
		if a := e.post("delete", s, origin, s.form("work", "confirm", "work")); a.status != http.StatusConflict || !strings.Contains(a.body, "in flight") {
			t.Errorf("delete while jobs are in flight: status %d, want 409\n%s", a.status, a.body)
		}
		if got := e.sizes("work"); *got != *before {
			t.Errorf("a refused delete changed the queue: %+v, was %+v", got, before)
		}
		jobs := before.Ready + before.InFlight + before.Delayed + before.Discarded
		posted("delete", s.form("work", "confirm", "work", "force", "yes"), fmt.Sprintf("./?done=delete&n=%d&q=work", jobs))
		if got := e.sizes("work"); got.Ready+got.InFlight+got.Delayed+got.Discarded != 0 {
			t.Errorf("after the delete: %+v, want no jobs", got)
		}
		contains(t, "the overview after the delete", e.get(fmt.Sprintf("?done=delete&n=%d&q=work", jobs), http.StatusOK).body,
			fmt.Sprintf("Deleted the queue &#34;work&#34; and its %d jobs.", jobs))
	})
}

// TestCSRF refuses a POST without the token, with a wrong one, with
// another browser's cookie, cross-origin, and without Origin or Referer;
// none changes Redis.
func TestCSRF(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "list", Config{})
	e.Seed()
	s := e.session()
	other := e.session()
	origin := e.srv.URL
	for _, c := range []struct {
		name   string
		s      session
		origin string
		form   url.Values
		why    string
	}{
		{"no token", s, origin, url.Values{"q": {"work"}}, "CSRF token"},
		{"wrong token", s, origin, url.Values{"q": {"work"}, "csrf": {"x" + s.token}}, "CSRF token"},
		{"another browser's token", s, origin, other.form("work"), "CSRF token"},
		{"no cookie", session{token: s.token}, origin, s.form("work"), "no CSRF cookie"},
		{"cross-origin", s, "https://evil.example", s.form("work"), "cross-origin"},
		{"null origin", s, "null", s.form("work"), "cross-origin"},
		{"no origin nor referer", s, "", s.form("work"), "cross-origin"},
	} {
		a := e.post("pause", c.s, c.origin, c.form)
		if a.status != http.StatusForbidden || !strings.Contains(a.body, c.why) {
			t.Errorf("%s: status %d, want 403 saying %q\n%s", c.name, a.status, c.why, a.body)
		}
	}
	if paused, err := e.insp.Paused(e.ctx, "work"); err != nil || paused {
		t.Errorf("a refused POST paused the queue: %v, %v", paused, err)
	}
	// A same-origin Referer stands in for a missing Origin.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+mount+"/pause", strings.NewReader(s.form("work").Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Referer", e.srv.URL+mount+"/queue?q=work")
	req.AddCookie(s.cookie)
	if a := e.do(req); a.status != http.StatusSeeOther {
		t.Errorf("POST with a same-origin Referer: status %d, want 303\n%s", a.status, a.body)
	}
	if paused, err := e.insp.Paused(e.ctx, "work"); err != nil || !paused {
		t.Errorf("the POST with a same-origin Referer did not pause: %v, %v", paused, err)
	}
}

// TestMethods: a GET never changes anything, pages take no POST.
func TestMethods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "list", Config{})
	e.Seed()
	for _, action := range []string{"pause", "purge?q=work&state=ready&confirm=yes", "redrive?q=work", "cancel?q=work&id=t1"} {
		e.get(action, http.StatusMethodNotAllowed)
	}
	if got := e.sizes("work"); got.Ready != 3 || got.Discarded != 2 || got.Delayed != 2 {
		t.Errorf("GETs of the actions changed the queue: %+v", got)
	}
	s := e.session()
	if a := e.post("queue", s, e.srv.URL, s.form("work")); a.status != http.StatusMethodNotAllowed {
		t.Errorf("POST to a page: status %d, want 405", a.status)
	}
	e.get("nosuch", http.StatusNotFound)
}

// TestReadOnly hides every form and refuses every POST.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "list", Config{ReadOnly: true})
	e.Seed()
	for _, page := range []string{"", "queue?q=work&state=discarded", "queue?q=work&state=delayed", "queue?q=work&state=finished", "job?q=work&id=t1", "job?q=work&id=d1"} {
		a := e.get(page, http.StatusOK)
		lacks(t, "read-only page "+page, a.body, "<form method=\"post\"", `name="csrf"`)
		contains(t, "read-only page "+page, a.body, "read-only")
	}
	for _, action := range []string{"pause", "redrive", "purge", "cancel", "reschedule", "resume", "delete"} {
		confirm := "yes"
		if action == "delete" {
			confirm = "work"
		}
		a := e.post(action, session{}, e.srv.URL, url.Values{"q": {"work"}, "state": {"ready"}, "id": {"t1"}, "confirm": {confirm}, "at": {"1h"}, "force": {"yes"}})
		if a.status != http.StatusForbidden || !strings.Contains(a.body, "read-only") {
			t.Errorf("POST %s to a read-only dashboard: status %d\n%s", action, a.status, a.body)
		}
	}
	if got := e.sizes("work"); got.Ready != 3 || got.Discarded != 2 || got.Delayed != 2 {
		t.Errorf("a read-only dashboard changed the queue: %+v", got)
	}
}

// TestEscaping shows a hostile payload, kind, queue name, header and
// discard reason as text.
func TestEscaping(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		const (
			hostile = "<script>alert(1)</script>"
			escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
			queue   = "<script>alert(1)</script>"
		)
		msgs := []*broker.Message{
			{ID: "p1", Kind: hostile, Queue: queue, Payload: []byte(hostile), Headers: map[string]string{hostile: hostile}, EnqueuedAt: time.Now()},
			{ID: "p2", Kind: "mail", Queue: queue, Payload: []byte(`{"html": "` + hostile + `"}`), EnqueuedAt: time.Now()},
		}
		if err := e.d.Enqueue(e.ctx, msgs); err != nil {
			t.Fatal(err)
		}
		c, ds := e.Fetch(queue, 1)
		if err := c.Discard(e.ctx, ds[0], hostile); err != nil {
			t.Fatal(err)
		}
		q := "q=" + url.QueryEscape(queue)
		for _, page := range []string{"", "queue?" + q, "queue?state=discarded&" + q, "job?id=p1&" + q, "job?id=p2&" + q} {
			a := e.get(page, http.StatusOK)
			lacks(t, "page "+page, a.body, "<script")
			contains(t, "page "+page, a.body, escaped)
		}
		contains(t, "discarded job p1", e.get("job?id=p1&"+q, http.StatusOK).body, "<th>"+escaped+"</th><td>"+escaped+"</td>")
		a := e.get("job?id=p2&"+q, http.StatusOK)
		contains(t, "job p2's JSON", a.body, "JSON shown indented", "&#34;html&#34;: &#34;"+escaped+"&#34;")
	})
}

// TestSecurityHeaders checks the headers of a page, the stylesheet, an
// error and a refused credential.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	auth, err := BasicAuth(&Credentials{Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "list", Config{Auth: auth})
	for _, path := range []string{"", "static/style.css", "nosuch", "queue?q=x"} {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+mount+"/"+path, nil)
		for _, authorized := range []bool{true, false} {
			if authorized {
				req.Header.Set("Authorization", "Bearer s3cret")
			} else {
				req.Header.Del("Authorization")
			}
			a := e.do(req)
			h := a.header
			csp := h.Get("Content-Security-Policy")
			if csp != contentSecurityPolicy || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") ||
				h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "same-origin" {
				t.Errorf("GET %q (authorized %v, status %d): headers %v", path, authorized, a.status, h)
			}
		}
	}
}

// TestBasicAuth lets through the token (Bearer or basic-auth password)
// or the user and password, and answers anything else 401 with a Basic
// challenge.
func TestBasicAuth(t *testing.T) {
	t.Parallel()
	if _, err := BasicAuth(&Credentials{User: "ops"}); err == nil {
		t.Error("BasicAuth with a user and no password or token did not fail")
	}
	if _, err := BasicAuth(nil); err == nil {
		t.Error("BasicAuth(nil) did not fail")
	}
	auth, err := BasicAuth(&Credentials{Token: "tok-1", User: "ops", Password: "pw-1"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "list", Config{Auth: auth})
	for _, c := range []struct {
		name string
		set  func(r *http.Request)
		want int
	}{
		{"none", func(*http.Request) {}, http.StatusUnauthorized},
		{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-1") }, http.StatusOK},
		{"wrong bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-2") }, http.StatusUnauthorized},
		{"token as password", func(r *http.Request) { r.SetBasicAuth("anyone", "tok-1") }, http.StatusOK},
		{"user and password", func(r *http.Request) { r.SetBasicAuth("ops", "pw-1") }, http.StatusOK},
		{"wrong password", func(r *http.Request) { r.SetBasicAuth("ops", "pw-2") }, http.StatusUnauthorized},
		{"wrong user", func(r *http.Request) { r.SetBasicAuth("root", "pw-1") }, http.StatusUnauthorized},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			req, _ := http.NewRequest(method, e.srv.URL+mount+"/", nil)
			c.set(req)
			a := e.do(req)
			want := c.want
			if method == http.MethodPost && want == http.StatusOK {
				want = http.StatusMethodNotAllowed // through to the page, which takes GET
			}
			if a.status != want {
				t.Errorf("%s %s: status %d, want %d", method, c.name, a.status, want)
			}
			if a.status == http.StatusUnauthorized && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), `Basic realm="conveyor"`) {
				t.Errorf("%s %s: WWW-Authenticate %q", method, c.name, a.header.Get("WWW-Authenticate"))
			}
			if a.status == http.StatusUnauthorized && strings.Contains(a.body, "Queues") {
				t.Errorf("%s %s: a 401 shows the page", method, c.name)
			}
		}
	}
}

// TestPayload shows JSON indented, text as it is, anything else quoted,
// and caps what it shows.
func TestPayload(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in           string
		text, form   string
		size, hidden int
	}{
		{`{"a":[1,2]}`, "{\n  \"a\": [\n    1,\n    2\n  ]\n}", "json", 11, 0},
		{"plain\ttext\nline 2", "plain\ttext\nline 2", "text", 17, 0},
		{"bad\xffutf8", `"bad\xffutf8"`, "quoted", 8, 0},
		{"esc\x1b[2J", `"esc\x1b[2J"`, "quoted", 7, 0},
		{"", "", "text", 0, 0},
	} {
		got := showPayload([]byte(c.in))
		if got.Text != c.text || got.Form != c.form || got.Size != c.size || got.Hidden != c.hidden {
			t.Errorf("showPayload(%q) = %+v, want %q %s %d %d", c.in, got, c.text, c.form, c.size, c.hidden)
		}
	}
	big := `{"a":"` + strings.Repeat("x", maxShownPayload) + `"}`
	got := showPayload([]byte(big))
	if got.Form != "text" || len(got.Text) != maxShownPayload || got.Hidden != len(big)-maxShownPayload {
		t.Errorf("a payload over the cap: form %s, %d bytes shown, %d hidden", got.Form, len(got.Text), got.Hidden)
	}
}

// TestCut shortens on a rune boundary and says that it did.
func TestCut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"hé", 2, "h…"}, // é is two bytes: not split
		{"", 0, ""},
	} {
		if got := cut(c.in, c.n); got != c.want {
			t.Errorf("cut(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
