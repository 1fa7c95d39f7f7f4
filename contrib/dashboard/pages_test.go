package dashboard

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// row matches the table row of the overview that starts with a queue's
// link and returns its cells' text.
func row(t *testing.T, body, queue string) []string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<tr>\s*<td><a href="queue\?q=` + regexp.QuoteMeta(queue) + `">.*?</tr>`)
	m := re.FindString(body)
	if m == "" {
		t.Fatalf("no row of queue %q in:\n%s", queue, body)
	}
	var cells []string
	for _, c := range regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(m, -1) {
		cells = append(cells, strings.TrimSpace(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(c[1], "")))
	}
	return cells
}

// TestOverview shows every queue with its figures, under the mount
// prefix, with links that stay below it.
func TestOverview(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		if a := e.get("", http.StatusOK); !strings.Contains(a.body, "No queues under this prefix yet") {
			t.Errorf("the overview of an empty prefix:\n%s", a.body)
		}
		e.Seed()
		e.Enqueue("later", "mail", "x1", &conveyor.EnqueueOptions{Delay: time.Hour})
		a := e.get("", http.StatusOK)
		got := row(t, a.body, "work")
		want := []string{"work", e.driver, "3", "2", "2", "2", "no", "0", "2", "-", "jobs processed per minute over the last hour", "Pause"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("row of work = %q, want %q", got, want)
		}
		if got := row(t, a.body, "later")[1:4]; strings.Join(got, "|") != "unknown|0|0" {
			t.Errorf("row of later = %q, want driver unknown and no ready or in-flight job", got)
		}
		contains(t, "the overview", a.body, e.prefix, `href="static/style.css"`, `href="queue?q=work&amp;state=discarded"`, `href="workers"`)
		// Every link is relative: none starts with "/", which would leave
		// the mount prefix.
		if m := regexp.MustCompile(`(href|action)="/`).FindString(a.body); m != "" {
			t.Errorf("the overview has an absolute link %s", m)
		}
		css := e.get("static/style.css", http.StatusOK)
		if ct := css.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/css") || !strings.Contains(css.body, "pre.payload") {
			t.Errorf("the stylesheet: Content-Type %q, body %.60q", ct, css.body)
		}
	})
}

// TestQueuePage lists each state's jobs, with pages, and the records of
// finished jobs with their outcome and error, escaped.
func TestQueuePage(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		ok1, bad1 := e.SeedFinished("work")
		e.Seed()
		for state, ids := range map[string][]string{
			"ready": {"r1", "r2", "r3"}, "in-flight": {"f1", "f2"}, "delayed": {"t1", "t2"}, "discarded": {"d1", "d2", "bad1"},
			"finished": {"ok1", "bad1"},
		} {
			a := e.get("queue?q=work&state="+state, http.StatusOK)
			for _, id := range ids {
				contains(t, state+" page", a.body, `href="job?id=`+id+`&amp;q=work&amp;state=`+state+`"`)
			}
			contains(t, state+" page", a.body, `class="current" aria-current="page">`+state+` (`)
		}
		a := e.get("queue?q=work&state=discarded", http.StatusOK)
		contains(t, "discarded page", a.body, "boom d1", "boom d2", `action="redrive"`, `action="purge"`)
		a = e.get("queue?q=work&state=delayed", http.StatusOK)
		contains(t, "delayed page", a.body, `action="cancel"`, `name="id" value="t1"`)
		a = e.get("queue?q=work&state=in-flight", http.StatusOK)
		lacks(t, "in-flight page", a.body, `action="purge"`)

		// The finished tab: the records' figures, a row per record with its
		// finish time, outcome and error (as text), and no purge.
		a = e.get("queue?q=work&state=finished", http.StatusOK)
		contains(t, "finished page", a.body, `aria-current="page">finished (2)</a>`, "Jobs 1 to 2 of 2 finished",
			"<th>Finished</th><th>Outcome</th><th>Error</th>",
			"<td>"+since(ok1.FinishedAt)[:20], "<td>acked</td>", `<td class="reason"></td>`,
			"<td>"+since(bad1.FinishedAt)[:20], "<td>discarded</td>", `<td class="reason">&lt;script&gt;alert(1)&lt;/script&gt;</td>`,
			"Retention has dropped 0 expired and 0 over the cap")
		lacks(t, "finished page", a.body, "<script", `action="purge"`, `action="redrive"`)
		if ok1.Outcome != "acked" || bad1.Outcome != "discarded" || bad1.Error != finishedError {
			t.Errorf("the seeded records: %+v and %+v", ok1, bad1)
		}
		// A tab counts its state on every page.
		contains(t, "ready page", e.get("queue?q=work", http.StatusOK).body, ">finished (2)</a>", ">discarded (3)</a>")

		// Pages of two: the first links to the next, the last to the previous.
		a = e.get("queue?q=work&state=ready&limit=2", http.StatusOK)
		contains(t, "ready page 1", a.body, "Jobs 1 to 2 of 3 ready", `offset=2`, "Next →")
		// The job's link, not "r3" anywhere: a random token on the page may spell it.
		lacks(t, "ready page 1", a.body, `href="job?id=r3&amp;`, "← Previous")
		a = e.get("queue?q=work&state=ready&limit=2&offset=2", http.StatusOK)
		contains(t, "ready page 2", a.body, "Jobs 3 to 3 of 3 ready", "r3", "← Previous")
		lacks(t, "ready page 2", a.body, "Next →", ">r1<")

		e.get("queue?q=nosuch", http.StatusNotFound)
		contains(t, "unknown state", e.get("queue?q=work&state=nosuch", http.StatusBadRequest).body,
			"want ready, in-flight, delayed, discarded or finished")
		e.get("queue?q=work&limit=0", http.StatusBadRequest)
		e.get("queue?q=bad%7Bname", http.StatusBadRequest)
	})
}

// TestJobPage shows a job's fields, headers and payload, a finished job's
// record and result, and finds one by the search form's query.
func TestJobPage(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		ok1, bad1 := e.SeedFinished("work")
		e.Seed()
		a := e.get("job?q=work&id=r1", http.StatusOK) // the search form's query: no state
		contains(t, "job r1", a.body, "Job <span class=\"name\">r1</span>", "<td>mail</td>", "<td>ready</td>",
			"<th>correlation-id</th><td>corr-42</td>", "JSON shown indented", "{\n  &#34;id&#34;: &#34;r1&#34;\n}")
		a = e.get("job?q=work&id=d2&state=discarded", http.StatusOK)
		contains(t, "job d2", a.body, "boom d2", "Re-drive this job")
		a = e.get("job?q=work&id=t1", http.StatusOK)
		contains(t, "job t1", a.body, "<th>Due</th>", "Cancel this timer", `action="reschedule"`, `name="at"`)
		a = e.get("job?q=work&id=nosuch", http.StatusNotFound)
		contains(t, "missing job", a.body, `job &#34;nosuch&#34; not found in queue &#34;work&#34;: it may have finished without a record`)

		// bad1 is both finished and discarded: the search finds where it
		// is now, its discard record; the finished tab's link, its record.
		contains(t, "job bad1 searched", e.get("job?q=work&id=bad1", http.StatusOK).body,
			"<td>discarded</td>", "Re-drive this job")
		for _, path := range []string{"job?id=bad1&q=work&state=finished"} {
			a = e.get(path, http.StatusOK)
			contains(t, path, a.body, "<td>mail</td>", "<td>finished</td>", `href="queue?q=work&amp;state=finished"`,
				"<th>Outcome</th><td>discarded</td>", "<th>Started</th><td>"+since(bad1.StartedAt)[:20],
				"<th>Finished</th><td>"+since(bad1.FinishedAt)[:20], "<th>Kept until</th><td>"+since(bad1.ExpiresAt)[:20],
				"<th>Worker</th><td>"+bad1.Worker+"</td>",
				`<th>Error</th><td class="reason">&lt;script&gt;alert(1)&lt;/script&gt;</td>`,
				"<h2>Result</h2>", "33 bytes, JSON shown indented", shownResult)
			lacks(t, path, a.body, "<script", "<h2>Payload</h2>", "<h2>Headers</h2>", `<form method="post"`)
		}
		if bad1.Worker == "" || bad1.StartedAt.IsZero() || !bad1.ExpiresAt.After(bad1.FinishedAt) {
			t.Errorf("bad1's record lacks a worker or a time: %+v", bad1)
		}
		a = e.get("job?id=ok1&q=work&state=finished", http.StatusOK)
		contains(t, "job ok1", a.body, "<th>Outcome</th><td>acked</td>", `<th>Error</th><td class="reason">none</td>`,
			"<th>Worker</th><td>"+ok1.Worker+"</td>", "{\n  &#34;invoice&#34;: &#34;INV-1&#34;\n}")
		// Its discard record is there too, with its re-drive.
		contains(t, "job bad1 discarded", e.get("job?id=bad1&q=work&state=discarded", http.StatusOK).body,
			"<td>discarded</td>", "Re-drive this job", "&lt;script&gt;alert(1)&lt;/script&gt;")
		e.get("job?q=work", http.StatusBadRequest)
	})
}

// TestWorkersPage lists a registered pool and its running jobs.
func TestWorkersPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "list", Config{})
	contains(t, "workers of an empty fleet", e.get("workers", http.StatusOK).body, "No live worker pools")
	now := time.Now()
	w := &broker.WorkerInfo{
		ID: "host1-42-abc", Host: "host1", PID: 42, Queues: []string{"work", "mail"}, Concurrency: 8,
		Running:      []broker.RunningJob{{ID: "j1", Kind: "sendmail", Queue: "work", StartedAt: now.Add(-time.Minute)}},
		RunningTotal: 1, StartedAt: now.Add(-time.Hour), SeenAt: now, Version: "(devel)",
	}
	if err := e.d.(broker.WorkerRegistry).RegisterWorker(e.ctx, w, time.Minute); err != nil {
		t.Fatal(err)
	}
	a := e.get("workers", http.StatusOK)
	contains(t, "workers", a.body, "<td>host1-42-abc</td><td>host1</td><td class=\"num\">42</td>",
		`<a href="queue?q=work">work</a>, <a href="queue?q=mail">mail</a>`, "host1-42-abc runs 1 jobs",
		`<a href="job?id=j1&amp;q=work&amp;state=in-flight">j1</a></td><td>sendmail</td>`, "(devel)")
}

// TestMountedWithSlash serves the pages and the stylesheet when the mount
// strips the prefix's trailing slash too, leaving paths without a
// leading one.
func TestMountedWithSlash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "list", Config{})
	e.Seed()
	dash, err := New(&Config{Redis: e.rdb, Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	h := http.StripPrefix(mount+"/", dash)
	for path, want := range map[string]string{"": "work", "static/style.css": "pre.payload", "queue?q=work&state=delayed": "t2"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, mount+"/"+path, nil))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), want) {
			t.Errorf("GET %s: status %d, body lacks %q", path, w.Code, want)
		}
	}
}

// TestQueuePageLimits shows a queue's concurrency limits with their running
// and waiting jobs, the kind escaped, and no table for a queue without.
func TestQueuePageLimits(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		e.Seed()
		a := e.get("queue?q=work", http.StatusOK)
		lacks(t, "queue page without limits", a.body, "Concurrency limits")
		const kind = "<b>mail</b>"
		if err := e.insp.SetLimit(e.ctx, "work", kind, 3); err != nil {
			t.Fatal(err)
		}
		if err := e.insp.SetLimit(e.ctx, "work", "", 50); err != nil {
			t.Fatal(err)
		}
		a = e.get("queue?q=work", http.StatusOK)
		contains(t, "queue page with limits", a.body, "<h2>Concurrency limits</h2>",
			`<td>(the whole queue)</td><td class="num">50</td><td class="num">0</td><td class="num">0</td>`,
			`<td>&lt;b&gt;mail&lt;/b&gt;</td><td class="num">3</td><td class="num">0</td><td class="num">0</td>`)
		lacks(t, "queue page with limits", a.body, kind)
		if err := e.insp.SetLimit(e.ctx, "work", kind, 0); err != nil {
			t.Fatal(err)
		}
		if err := e.insp.SetLimit(e.ctx, "work", "", 0); err != nil {
			t.Fatal(err)
		}
	})
}
