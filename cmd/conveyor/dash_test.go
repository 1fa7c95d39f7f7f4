package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDashRefuses refuses to start without credentials, and without
// them on an address other hosts reach.
func TestDashRefuses(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "list")
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "no credentials: set CONVEYOR_DASH_TOKEN"},
		{[]string{"-listen", "127.0.0.1:0"}, map[string]string{"CONVEYOR_DASH_USER": "ops"}, "no credentials"},
		{[]string{"-no-auth", "-listen", "0.0.0.0:8080"}, nil, "use a loopback address"},
		{[]string{"-no-auth", "-listen", ":8080"}, nil, "use a loopback address"},
		{[]string{"-no-auth", "-listen", "127.0.0.1:0"}, map[string]string{"CONVEYOR_DASH_TOKEN": "t"}, "drop one or the other"},
	} {
		var stdout, stderr strings.Builder
		args := append([]string{"-redis", e.url, "-prefix", e.prefix}, c.args...)
		err := dash(e.ctx, args, stdio{in: strings.NewReader(""), out: &stdout, err: &stderr}, func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("dash %q with %v: err %v, stderr %q; want a usage error saying %q", c.args, c.env, err, stderr.String(), c.want)
		}
	}
}

// serveDash starts conveyor dash with args and env on the env's Redis
// and returns its base URL; it stops when the test ends.
func serveDash(t *testing.T, e *cliEnv, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		all := append([]string{"-redis", e.url, "-prefix", e.prefix, "-listen", "127.0.0.1:0"}, args...)
		err := dash(ctx, all, stdio{in: strings.NewReader(""), out: io.Discard, err: w}, func(k string) string { return env[k] })
		_ = w.CloseWithError(io.EOF)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dash: %v", err)
		}
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("dash did not start: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	m := regexp.MustCompile(`on (http://\S+/)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("dash said %q", line)
	}
	return m[1]
}

func getPage(t *testing.T, url string, set func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	set(req)
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestDash serves the dashboard behind a token, and without one on
// loopback with -no-auth, read-only.
func TestDash(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "list")
	e.Seed()
	base := serveDash(t, e, map[string]string{"CONVEYOR_DASH_TOKEN": "tok-9"})
	if code, _ := getPage(t, base, func(*http.Request) {}); code != http.StatusUnauthorized {
		t.Errorf("GET without credentials: %d, want 401", code)
	}
	if code, _ := getPage(t, base, func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-8") }); code != http.StatusUnauthorized {
		t.Errorf("GET with a wrong token: %d, want 401", code)
	}
	code, body := getPage(t, base, func(r *http.Request) { r.SetBasicAuth("me", "tok-9") })
	if code != http.StatusOK || !strings.Contains(body, `<a href="queue?q=work">work</a>`) || !strings.Contains(body, `action="pause"`) {
		t.Errorf("GET with the token: %d\n%s", code, body)
	}

	open := serveDash(t, e, nil, "-no-auth", "-read-only")
	code, body = getPage(t, open+"queue?q=work&state=discarded", func(*http.Request) {})
	if code != http.StatusOK || !strings.Contains(body, "boom d1") || strings.Contains(body, "<form method=\"post\"") {
		t.Errorf("GET of a read-only dashboard without auth: %d\n%s", code, body)
	}
}

// TestDashMetrics serves /metrics behind the dashboard's credentials,
// read-only, and leaves it out with -metrics=false.
func TestDashMetrics(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "list")
	e.Seed()
	base := serveDash(t, e, map[string]string{"CONVEYOR_DASH_TOKEN": "tok-9"})
	token := func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-9") }
	if code, _ := getPage(t, base+"metrics", func(*http.Request) {}); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without credentials: %d, want 401", code)
	}
	code, body := getPage(t, base+"metrics", token)
	want := []string{
		"# TYPE conveyor_queue_depth gauge",
		`conveyor_queue_depth{queue="work",driver="list",state="ready"} 3`,
		`conveyor_queue_depth{queue="work",driver="list",state="in_flight"} 2`,
		`conveyor_queue_depth{queue="work",driver="list",state="delayed"} 2`,
		`conveyor_queue_depth{queue="work",driver="list",state="discarded"} 2`,
		`conveyor_queue_failed_total{queue="work",driver="list"} 2`,
		"conveyor_workers 0",
	}
	if code != http.StatusOK {
		t.Errorf("GET /metrics with the token: %d\n%s", code, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", w, body)
		}
	}
	post := func(r *http.Request) { token(r); r.Method = http.MethodPost }
	if code, _ := getPage(t, base+"metrics", post); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", code)
	}

	open := serveDash(t, e, nil, "-no-auth")
	if code, body := getPage(t, open+"metrics", func(*http.Request) {}); code != http.StatusOK || !strings.Contains(body, want[1]) {
		t.Errorf("GET /metrics without auth, -no-auth: %d\n%s", code, body)
	}
	off := serveDash(t, e, nil, "-no-auth", "-metrics=false")
	if code, body := getPage(t, off+"metrics", func(*http.Request) {}); code != http.StatusNotFound || strings.Contains(body, "conveyor_queue_depth") {
		t.Errorf("GET /metrics with -metrics=false: %d, want the dashboard's 404\n%s", code, body)
	}
}
