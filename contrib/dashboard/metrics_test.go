package dashboard

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/stream"
	"github.com/conveyorq/conveyor/internal/inspecttest"
)

// weirdQueue is a queue name with the characters a label value escapes
// that broker.ValidateQueue allows (a line feed it refuses).
const weirdQueue = `we"ird\q`

// TestMetrics serves, per queue, the figures the Inspector reads, and
// the worker fleet's, in an exposition a parser of the format accepts.
func TestMetrics(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		// One job acked (processed 1), then Seed: work holds every state,
		// two discards (failed 2).
		e.Enqueue("work", "mail", "a1", nil)
		c, ds := e.Fetch("work", 1)
		if err := c.Ack(e.ctx, ds[0]); err != nil {
			t.Fatal(err)
		}
		e.Seed()
		if err := e.insp.Pause(e.ctx, "work"); err != nil {
			t.Fatal(err)
		}
		e.Enqueue(weirdQueue, "mail", "w1", nil)
		e.capped("capped")
		reg := e.d.(broker.WorkerRegistry)
		for _, w := range []*broker.WorkerInfo{
			{ID: "h-1-a", Host: "h", PID: 1, Queues: []string{"work"}, Concurrency: 8, RunningTotal: 3, SeenAt: time.Now()},
			{ID: "h-2-b", Host: "h", PID: 2, Queues: []string{"work"}, Concurrency: 4, SeenAt: time.Now()},
		} {
			if err := reg.RegisterWorker(e.ctx, w, time.Minute); err != nil {
				t.Fatal(err)
			}
		}

		m, err := NewMetrics(&Config{Redis: e.rdb, Prefix: e.prefix})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(m)
		t.Cleanup(srv.Close)
		a := e.do(newRequest(t, http.MethodGet, srv.URL+"/metrics"))
		if a.status != http.StatusOK || a.header.Get("Content-Type") != "text/plain; version=0.0.4; charset=utf-8" {
			t.Fatalf("GET /metrics: %d, Content-Type %q\n%s", a.status, a.header.Get("Content-Type"), a.body)
		}
		got, err := parseExposition(a.body)
		if err != nil {
			t.Fatalf("the exposition does not parse: %v\n%s", err, a.body)
		}

		want := map[string]float64{
			series("conveyor_workers"):              2,
			series("conveyor_workers_concurrency"):  12,
			series("conveyor_workers_running_jobs"): 3,
		}
		for _, q := range []string{"work", weirdQueue, "capped"} {
			s := e.sizes(q)
			l := []string{"queue", q, "driver", e.driver}
			for state, n := range map[string]int64{"ready": s.Ready, "in_flight": s.InFlight, "delayed": s.Delayed, "discarded": s.Discarded, "grouped": s.Grouped, "limited": s.Limited} {
				want[series("conveyor_queue_depth", append(l, "state", state)...)] = float64(n)
			}
			want[series("conveyor_queue_processed_total", l...)] = float64(s.Processed)
			want[series("conveyor_queue_failed_total", l...)] = float64(s.Failed)
			want[series("conveyor_queue_discards_dropped_total", append(l, "reason", "count")...)] = float64(s.Discards.DroppedByCount)
			want[series("conveyor_queue_discards_dropped_total", append(l, "reason", "age")...)] = float64(s.Discards.DroppedByAge)
			want[series("conveyor_queue_paused", l...)] = map[bool]float64{true: 1, false: 0}[q == "work"]
		}
		// The Inspector's own figures, so that a comparison with zeros
		// cannot pass.
		work := []string{"queue", "work", "driver", e.driver}
		for k, v := range map[string]float64{
			series("conveyor_queue_depth", append(work, "state", "ready")...):                                         3,
			series("conveyor_queue_depth", append(work, "state", "in_flight")...):                                     2,
			series("conveyor_queue_depth", append(work, "state", "delayed")...):                                       2,
			series("conveyor_queue_depth", append(work, "state", "discarded")...):                                     2,
			series("conveyor_queue_processed_total", work...):                                                         1,
			series("conveyor_queue_failed_total", work...):                                                            2,
			series("conveyor_queue_depth", "queue", weirdQueue, "driver", e.driver, "state", "ready"):                 1,
			series("conveyor_queue_depth", "queue", "capped", "driver", e.driver, "state", "discarded"):               1,
			series("conveyor_queue_discards_dropped_total", "queue", "capped", "driver", e.driver, "reason", "count"): 1,
		} {
			if want[k] != v {
				t.Errorf("the Inspector reads %s = %v, the test expects %v", k, want[k], v)
			}
		}
		for k, v := range want {
			if g, ok := got.values[k]; !ok || g != v {
				t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
			}
		}
		for k := range got.values {
			if _, ok := want[k]; !ok && !strings.HasPrefix(k, "conveyor_scrape_duration_seconds") {
				t.Errorf("unexpected series %s", k)
			}
		}
		if d, ok := got.values[series("conveyor_scrape_duration_seconds")]; !ok || d <= 0 || d > 60 {
			t.Errorf("conveyor_scrape_duration_seconds = %v (present %v)", d, ok)
		}
		for name, kind := range map[string]string{
			"conveyor_queue_depth": "gauge", "conveyor_queue_paused": "gauge", "conveyor_queue_processed_total": "counter",
			"conveyor_queue_failed_total": "counter", "conveyor_queue_discards_dropped_total": "counter",
			"conveyor_workers": "gauge", "conveyor_scrape_duration_seconds": "gauge",
		} {
			if got.types[name] != kind || got.help[name] == "" {
				t.Errorf("family %s: TYPE %q, HELP %q; want TYPE %s and a HELP", name, got.types[name], got.help[name], kind)
			}
		}
		contains(t, "the exposition", a.body, `queue="we\"ird\\q"`)
	})
}

// capped discards two jobs of queue through a driver keeping one discard
// record per queue, so that retention drops one (DroppedByCount 1).
func (e *env) capped(queue string) {
	e.t.Helper()
	var d broker.Driver
	var err error
	switch e.driver {
	case "list":
		d, err = list.New(e.rdb, &list.Config{Prefix: e.prefix, DiscardMax: 1})
	case "stream":
		d, err = stream.New(e.rdb, &stream.Config{Prefix: e.prefix, DiscardMax: 1})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := conveyor.NewClient(d, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	s := &inspecttest.Seeder{T: e.t, Ctx: e.ctx, Client: c, Driver: d}
	s.Enqueue(queue, "mail", "c1", nil)
	s.Enqueue(queue, "mail", "c2", nil)
	cons, ds := s.Fetch(queue, 2)
	for _, dl := range ds {
		if err := cons.Discard(e.ctx, dl, "capped"); err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestMetricsServes answers HEAD, refuses other methods than GET and
// HEAD, asks for credentials behind Auth, and answers 500 when Redis
// cannot be read.
func TestMetricsServes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "list", Config{})
	e.Seed()
	auth, err := BasicAuth(&Credentials{Token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(&Config{Redis: e.rdb, Prefix: e.prefix, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	bearer := func(method string) *http.Request {
		r := newRequest(t, method, srv.URL+"/metrics")
		r.Header.Set("Authorization", "Bearer tok-1")
		return r
	}
	if a := e.do(newRequest(t, http.MethodGet, srv.URL+"/metrics")); a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") == "" {
		t.Errorf("GET without credentials: %d, WWW-Authenticate %q; want 401 and a challenge", a.status, a.header.Get("WWW-Authenticate"))
	}
	if a := e.do(bearer(http.MethodGet)); a.status != http.StatusOK || !strings.Contains(a.body, `conveyor_queue_depth{queue="work",driver="list",state="ready"} 3`) {
		t.Errorf("GET with the token: %d\n%s", a.status, a.body)
	}
	if a := e.do(bearer(http.MethodHead)); a.status != http.StatusOK || a.body != "" || !strings.HasPrefix(a.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("HEAD: %d, Content-Type %q, body %q", a.status, a.header.Get("Content-Type"), a.body)
	}
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		if a := e.do(bearer(method)); a.status != http.StatusMethodNotAllowed || a.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q; want 405 and GET, HEAD", method, a.status, a.header.Get("Allow"))
		}
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = down.Close() })
	m, err = NewMetrics(&Config{Redis: down, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusInternalServerError || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") ||
		!strings.Contains(w.Body.String(), "read the queues") || strings.Contains(w.Body.String(), "conveyor_") {
		t.Errorf("GET with Redis down: %d, Content-Type %q\n%s", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
	if _, err := NewMetrics(&Config{}); err == nil {
		t.Error("NewMetrics without Redis did not fail")
	}
}

// TestEscapeLabel escapes what the format asks, a line feed included,
// and replaces invalid UTF-8.
func TestEscapeLabel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"work":         "work",
		weirdQueue:     `we\"ird\\q`,
		"a\nb":         `a\nb`,
		`\n`:           `\\n`,
		"caf\xe9":      "caf\uFFFD",
		"ü-\"\\\n-end": `ü-\"\\\n-end`,
	} {
		if got := escapeLabel(in); got != want {
			t.Errorf("escapeLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if got := escapeHelp("a\\b\nc\""); got != `a\\b\nc"` {
		t.Errorf("escapeHelp = %q", got)
	}
}

// FuzzEscapeLabel: whatever a label value holds, the sample parses back to
// it (invalid UTF-8 replaced).
func FuzzEscapeLabel(f *testing.F) {
	for _, s := range []string{"", "work", weirdQueue, "a\nb", `\"`, "\xff\xfe", "}\" 1\nconveyor_x 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var e exposer
		e.family("m", "gauge", "help")
		e.sample("m", 7, "queue", s, "driver", "list")
		got, err := parseExposition(e.String())
		if err != nil {
			t.Fatalf("%q: %v\n%s", s, err, e.String())
		}
		if v, ok := got.values[series("m", "queue", strings.ToValidUTF8(s, "\uFFFD"), "driver", "list")]; !ok || v != 7 || len(got.values) != 1 {
			t.Fatalf("%q: parsed %v", s, got.values)
		}
	})
}

func newRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// scraped is a text exposition parsed: each family's TYPE and HELP, and
// each series' value under its series key.
type scraped struct {
	types, help map[string]string
	values      map[string]float64
}

// series is the key of the series of metric name with the labels given,
// name then value, in any order.
func series(name string, labels ...string) string {
	var pairs []string
	for k := 0; k+1 < len(labels); k += 2 {
		pairs = append(pairs, labels[k]+"="+strconv.Quote(labels[k+1]))
	}
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// parseExposition parses the text format as far as the metrics use it:
// HELP and TYPE lines, each before its family's samples and once only,
// and samples without timestamps, every sample's family declared, no
// series twice, the whole in UTF-8.
func parseExposition(body string) (*scraped, error) {
	x := &scraped{types: map[string]string{}, help: map[string]string{}, values: map[string]float64{}}
	if !utf8.ValidString(body) {
		return nil, errors.New("not UTF-8")
	}
	if !strings.HasSuffix(body, "\n") {
		return nil, errors.New("the last line has no line feed")
	}
	var family string // the family whose samples may come
	for n, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		fail := func(format string, args ...any) (*scraped, error) {
			return nil, fmt.Errorf("line %d %q: %s", n+1, line, fmt.Sprintf(format, args...))
		}
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			kw, rest, _ := strings.Cut(rest, " ")
			name, text, _ := strings.Cut(rest, " ")
			if !validName(name) {
				return fail("bad metric name %q", name)
			}
			switch kw {
			case "HELP":
				if _, dup := x.help[name]; dup {
					return fail("second HELP")
				}
				x.help[name] = text
			case "TYPE":
				if _, dup := x.types[name]; dup {
					return fail("second TYPE")
				}
				if !slices.Contains([]string{"counter", "gauge", "histogram", "summary", "untyped"}, text) {
					return fail("bad type %q", text)
				}
				x.types[name] = text
			default:
				return fail("unknown keyword")
			}
			family = name
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return fail("%v", err)
		}
		if name != family || x.types[name] == "" || x.help[name] == "" {
			return fail("sample outside its family's HELP and TYPE")
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return fail("value: %v", err)
		}
		key := series(name, labels...)
		if _, dup := x.values[key]; dup {
			return fail("series %s twice", key)
		}
		x.values[key] = v
	}
	return x, nil
}

// parseSample parses `name{label="value",...} value`, the braces being
// optional, and unescapes the label values.
func parseSample(line string) (name string, labels []string, value string, err error) {
	i := nameLen(line)
	name, rest := line[:i], line[i:]
	if !validName(name) {
		return "", nil, "", fmt.Errorf("bad metric name %q", name)
	}
	if rest, ok := strings.CutPrefix(rest, "{"); ok {
		for {
			j := nameLen(rest)
			label := rest[:j]
			if !validName(label) {
				return "", nil, "", fmt.Errorf("bad label name at %q", rest)
			}
			if rest, ok = strings.CutPrefix(rest[j:], `="`); !ok {
				return "", nil, "", fmt.Errorf("label %s: no =\"", label)
			}
			var v strings.Builder
			for {
				if rest == "" {
					return "", nil, "", fmt.Errorf("label %s: unterminated value", label)
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' {
					if rest == "" {
						return "", nil, "", fmt.Errorf("label %s: escape at the end", label)
					}
					switch rest[0] {
					case '\\', '"':
						v.WriteByte(rest[0])
					case 'n':
						v.WriteByte('\n')
					default:
						return "", nil, "", fmt.Errorf("label %s: bad escape \\%c", label, rest[0])
					}
					rest = rest[1:]
					continue
				}
				v.WriteByte(c)
			}
			labels = append(labels, label, v.String())
			if r, ok := strings.CutPrefix(rest, ","); ok {
				rest = r
				continue
			}
			if rest, ok = strings.CutPrefix(rest, "}"); !ok {
				return "", nil, "", fmt.Errorf("label %s: neither , nor } after the value", label)
			}
			break
		}
		line = rest
	} else {
		line = rest
	}
	value, ok := strings.CutPrefix(line, " ")
	if !ok || value == "" || strings.ContainsAny(value, " \t") {
		return "", nil, "", fmt.Errorf("want one space and a value (no timestamp), got %q", line)
	}
	return name, labels, value, nil
}

// nameLen is the length of the name s starts with: [a-zA-Z_:][a-zA-Z0-9_:]*.
func nameLen(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return i
		}
	}
	return len(s)
}

func validName(s string) bool { return s != "" && nameLen(s) == len(s) }
