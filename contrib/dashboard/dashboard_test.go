package dashboard

import (
	"context"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/inspecttest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/worker"
)

// mount is the path prefix the tests mount the dashboard under, as an
// app would.
const mount = "/admin/jobs"

// env is a test's own key prefix on the test Redis, a driver on it to put
// jobs in place, and a dashboard on it served under mount.
type env struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	driver string
	d      broker.Driver
	client *conveyor.Client
	insp   *conveyor.Inspector
	srv    *httptest.Server
	*inspecttest.Seeder
}

// newEnv starts a dashboard of cfg (Redis and Prefix set here) on a new
// prefix with a driver named driver.
func newEnv(t *testing.T, driver string, cfg Config) *env {
	t.Helper()
	dt, ok := drivertest.Named(driver)
	if !ok {
		t.Fatalf("no driver %q", driver)
	}
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d := dt.Must(t, rdb, prefix)
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "work"})
	if err != nil {
		t.Fatal(err)
	}
	insp, err := conveyor.NewInspector(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Redis, cfg.Prefix = rdb, prefix
	dash, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(mount+"/", http.StripPrefix(mount, dash))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, rdb: rdb, prefix: prefix, driver: driver, d: d, client: c, insp: insp, srv: srv,
		Seeder: &inspecttest.Seeder{T: t, Ctx: ctx, Client: c, Driver: d}}
}

// sizes reads queue's figures straight from the Inspector.
func (e *env) sizes(queue string) *conveyor.QueueSizes {
	e.t.Helper()
	s, err := e.insp.Queue(e.ctx, queue)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// The result and error of the discarded job SeedFinished records, and the
// result as a job's page shows it, indented and escaped.
const (
	finishedResult = `{"invoice":"INV-2","lines":[1,2]}`
	finishedError  = "<script>alert(1)</script>"
	shownResult    = "{\n  &#34;invoice&#34;: &#34;INV-2&#34;,\n  &#34;lines&#34;: [\n    1,\n    2\n  ]\n}"
)

// SeedFinished runs a worker pool keeping records of the jobs it finishes
// (Records: time.Hour) on queue until it has finished two, and stops it:
// ok1 (kind invoice) acked with the result {"invoice":"INV-1"}, and bad1
// (kind mail) whose handler set finishedResult and failed with
// finishedError on its only attempt, discarded (a record, and a discard
// record). It returns their records. The pool runs every ready job of
// queue: call it before Seed on the same queue.
func (e *env) SeedFinished(queue string) (ok1, bad1 *conveyor.JobRecord) {
	e.t.Helper()
	mux := worker.NewMux()
	mux.HandleFunc("invoice", func(ctx context.Context, job *conveyor.Job) error {
		return job.SetResult([]byte(`{"invoice":"INV-1"}`))
	})
	mux.HandleFunc("mail", func(ctx context.Context, job *conveyor.Job) error {
		if err := job.SetResult([]byte(finishedResult)); err != nil {
			return err
		}
		return errors.New(finishedError)
	})
	e.Enqueue(queue, "invoice", "ok1", nil)
	e.Enqueue(queue, "mail", "bad1", &conveyor.EnqueueOptions{MaxAttempts: 1})
	p, err := worker.NewPool(e.d, mux, &worker.Config{Queue: queue, Records: time.Hour, RegistryInterval: -1,
		Logger: slog.New(slog.DiscardHandler)}) // bad1's discard is meant
	if err != nil {
		e.t.Fatal(err)
	}
	stop := drivertest.Background(e.t, p.Run)
	defer stop()
	record := func(id string) *conveyor.JobRecord {
		var j *conveyor.JobInfo
		redistest.Eventually(e.t, "the record of "+id, func() bool {
			j, err = e.insp.Job(e.ctx, queue, id, conveyor.JobFinished)
			if err != nil && !errors.Is(err, conveyor.ErrJobNotFound) {
				e.t.Fatal(err)
			}
			return err == nil
		})
		if j.Record == nil {
			e.t.Fatalf("job %s: state %v without its record", id, j.State)
		}
		return j.Record
	}
	return record("ok1"), record("bad1")
}

// answer is one response, its body read.
type answer struct {
	status int
	header http.Header
	body   string
}

// do sends req to the dashboard's server, following no redirect.
func (e *env) do(req *http.Request) answer {
	e.t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req.WithContext(e.ctx))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// get GETs path (below mount) and fails the test unless the status is
// want.
func (e *env) get(path string, want int) answer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+mount+"/"+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	a := e.do(req)
	if a.status != want {
		e.t.Fatalf("GET %s: status %d, want %d\n%s", path, a.status, want, a.body)
	}
	return a
}

// session is what a browser keeps of a page: the CSRF cookie and the
// token its forms carry.
type session struct {
	cookie *http.Cookie
	token  string
}

var tokenField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// session GETs the overview as a browser would and keeps its cookie
// and token.
func (e *env) session() session {
	e.t.Helper()
	a := e.get("", http.StatusOK)
	m := tokenField.FindStringSubmatch(a.body)
	if m == nil {
		e.t.Fatalf("the overview has no CSRF token:\n%s", a.body)
	}
	resp := http.Response{Header: a.header}
	for _, c := range resp.Cookies() {
		if c.Name == csrfCookie {
			return session{cookie: c, token: html.UnescapeString(m[1])}
		}
	}
	e.t.Fatalf("the overview set no %s cookie", csrfCookie)
	return session{}
}

// post POSTs form to action (below mount) with s's cookie and origin as
// the header Origin ("" for none).
func (e *env) post(action string, s session, origin string, form url.Values) answer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+mount+"/"+action, strings.NewReader(form.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if s.cookie != nil {
		req.AddCookie(s.cookie)
	}
	return e.do(req)
}

// form builds a form for queue with the session's token and the pairs
// given, name then value.
func (s session) form(queue string, pairs ...string) url.Values {
	f := url.Values{"q": {queue}, "csrf": {s.token}}
	for k := 0; k+1 < len(pairs); k += 2 {
		f.Set(pairs[k], pairs[k+1])
	}
	return f
}

// contains fails the test unless body holds every one of want.
func contains(t *testing.T, what, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, body)
		}
	}
}

// lacks fails the test if body holds any of bad.
func lacks(t *testing.T, what, body string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(body, b) {
			t.Errorf("%s holds %q:\n%s", what, b, body)
		}
	}
}

// eachDriver runs test on the list and the stream driver, in parallel.
func eachDriver(t *testing.T, cfg Config, test func(t *testing.T, e *env)) {
	t.Parallel()
	for _, dt := range drivertest.Durable {
		t.Run(dt.Name, func(t *testing.T) {
			t.Parallel()
			test(t, newEnv(t, dt.Name, cfg))
		})
	}
}
