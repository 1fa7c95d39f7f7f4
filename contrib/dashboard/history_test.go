package dashboard

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/delay"
	"github.com/conveyorq/conveyor/internal/history"
)

// writeHistory stores samples of queue straight in its history key, as a
// keeper would have over the last minutes: n samples a minute apart, the
// last one a minute ago, processed growing by perMin each minute and
// ready by one.
func (e *env) writeHistory(queue string, n int, perMin int64) {
	e.t.Helper()
	now := time.Now().Truncate(time.Minute)
	key := history.Key(e.prefix, queue)
	for k := range n {
		at := now.Add(time.Duration(k-n) * time.Minute)
		err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", at.UnixMilli()), Values: []any{
			"r", k, "f", 2, "d", 0, "x", 0, "g", 0, "l", 0, "p", int64(k) * perMin, "e", 0,
		}}).Err()
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

var polyline = regexp.MustCompile(`<polyline class="([a-z-]+)" points="([^"]*)"`)

// lines returns the points of each polyline of body by class.
func lines(body string) map[string][]string {
	out := map[string][]string{}
	for _, m := range polyline.FindAllStringSubmatch(body, -1) {
		out[m[1]] = append(out[m[1]], strings.Fields(m[2])...)
	}
	return out
}

// TestHistoryCharts: the overview shows each queue's rate and a line of
// the last hour from its history, and a queue's page charts its
// throughput and sizes over the span asked for; a queue without history
// says so and shows "-".
func TestHistoryCharts(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		e.Seed()
		e.Enqueue("quiet", "mail", "q1", nil)
		e.writeHistory("work", 30, 600)

		a := e.get("", http.StatusOK)
		if got := row(t, a.body, "work")[9]; got != "600" {
			t.Errorf("the overview's rate of work = %q, want 600", got)
		}
		if got := row(t, a.body, "quiet")[9]; got != "-" {
			t.Errorf("the overview's rate of a queue without history = %q, want -", got)
		}
		// 29 rates between 30 samples; the quiet queue draws none.
		if got := len(lines(a.body)["s-processed"]); got != 29 {
			t.Errorf("the overview's lines hold %d points, want 29", got)
		}

		a = e.get("queue?q=work", http.StatusOK)
		got := lines(a.body)
		for class, n := range map[string]int{"s-processed": 29, "s-failed": 29, "s-ready": 30, "s-inflight": 30, "s-delayed": 30, "s-discarded": 30} {
			if len(got[class]) != n {
				t.Errorf("the queue's %s line has %d points, want %d", class, len(got[class]), n)
			}
		}
		for _, class := range []string{"s-grouped", "s-limited"} {
			if len(got[class]) != 0 {
				t.Errorf("a %s line is drawn though every sample has 0", class)
			}
		}
		contains(t, "the queue's page", a.body, "processed/min 600", "ready 29", `class="current" aria-current="true">1h<`)

		// A gap in the samples breaks the line in two.
		e.writeHistory("gappy", 10, 60)
		key := history.Key(e.prefix, "gappy")
		ids, err := e.rdb.XRange(e.ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.XDel(e.ctx, key, ids[4].ID, ids[5].ID, ids[6].ID).Err(); err != nil {
			t.Fatal(err)
		}
		e.Enqueue("gappy", "mail", "g1", nil)
		a = e.get("queue?q=gappy", http.StatusOK)
		if n := strings.Count(a.body, `<polyline class="s-ready"`); n != 2 {
			t.Errorf("the ready line of a history with a gap has %d segments, want 2", n)
		}

		a = e.get("queue?q=quiet&range=24h", http.StatusOK)
		contains(t, "a queue without history", a.body, "no history in this span", `class="current" aria-current="true">24h<`)
		if n := len(lines(a.body)); n != 0 {
			t.Errorf("a queue without history draws %d lines", n)
		}
		e.get("queue?q=work&range=2h", http.StatusBadRequest)

		// A history entry that is not a sample: the page stands, says so.
		if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: history.Key(e.prefix, "work"), Values: []any{"p", "<b>x</b>"}}).Err(); err != nil {
			t.Fatal(err)
		}
		a = e.get("queue?q=work", http.StatusOK)
		contains(t, "a page over a broken history", a.body, "The history cannot be read", "&lt;b&gt;x&lt;/b&gt;")
		if strings.Contains(a.body, "<b>x</b>") {
			t.Error("the broken history's value is shown unescaped")
		}
		if got := row(t, e.get("", http.StatusOK).body, "work")[9]; got != "-" {
			t.Errorf("the overview's rate over a broken history = %q, want -", got)
		}
	})
}

func TestChartHelpers(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0", 0.25: "0.2", 3: "3", 9.5: "9.5", 42.4: "42", 12_345: "12k", 2_500_000: "2.5M"} {
		if got := short(v); got != want {
			t.Errorf("short(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]float64{0: 1, 0.3: 1, 3: 5, 11: 20, 600: 1000, 5000: 5000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
	t0 := time.Unix(1_800_000_000, 0)
	var ss []broker.Sample
	for k := range 1000 {
		ss = append(ss, broker.Sample{At: t0.Add(time.Duration(k) * time.Minute), Processed: int64(k) * 10})
	}
	th := thin(ss, 100)
	if len(th) > 101 || th[len(th)-1] != ss[999] {
		t.Fatalf("thin kept %d samples ending %v, want at most 101 ending with the last", len(th), th[len(th)-1].At)
	}
	_, rs := rateSeries(th)
	for _, v := range rs[0].values {
		if v != 10 {
			t.Fatalf("rates over thinned samples %v, want 10 per minute throughout", rs[0].values)
		}
	}
	// A counter that went back (the queue began again) counts from 0.
	_, rs = rateSeries([]broker.Sample{{At: t0, Processed: 500}, {At: t0.Add(time.Minute), Processed: 20}})
	if rs[0].values[0] != 20 {
		t.Errorf("rate after a reset = %v, want 20", rs[0].values[0])
	}
}

// TestOverviewPages: the overview lists the queues a page at a time, by
// name, with links to the next and previous pages, and filters them by a
// part of the name, which it escapes.
func TestOverviewPages(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		for _, q := range []string{"b1", "a2", "a1", "b2", "a3"} {
			e.Enqueue(q, "mail", q+"-job", nil)
		}
		names := func(body string) []string {
			var out []string
			for _, m := range regexp.MustCompile(`<tr>\s*<td><a href="queue\?q=([a-z0-9]+)">`).FindAllStringSubmatch(body, -1) {
				out = append(out, m[1])
			}
			return out
		}
		next := regexp.MustCompile(`<a href="([^"]*)">Next →</a>`)
		path, pages := "?limit=2", [][]string{}
		for path != "" {
			a := e.get(strings.TrimPrefix(strings.ReplaceAll(path, "&amp;", "&"), "./"), http.StatusOK)
			pages = append(pages, names(a.body))
			path = ""
			if m := next.FindStringSubmatch(a.body); m != nil {
				path = m[1]
			}
			if len(pages) > 5 {
				t.Fatal("the Next links do not end")
			}
		}
		if got := fmt.Sprint(pages); got != "[[a1 a2] [a3 b1] [b2]]" {
			t.Errorf("the overview's pages of 2 = %s, want [[a1 a2] [a3 b1] [b2]]", got)
		}
		a := e.get("?match=b", http.StatusOK)
		if got := fmt.Sprint(names(a.body)); got != "[b1 b2]" {
			t.Errorf("queues whose name holds b = %s, want [b1 b2]", got)
		}
		contains(t, "a filtered overview", a.body, "Queues 1 to 2 of 2 whose name holds <code>b</code> (5 in all)")
		a = e.get("?match=%3Cscript%3E", http.StatusOK)
		contains(t, "a filter no queue matches", a.body, "No queue's name holds <code>&lt;script&gt;</code>")
		if strings.Contains(a.body, "<script>") {
			t.Error("the filter is shown unescaped")
		}
		e.get("?offset=-1", http.StatusBadRequest)
		e.get("?limit=0", http.StatusBadRequest)
	})
}

// TestCronPage: a queue's cron page lists the series that stored a fire,
// by name, the pending one linked to its timer, the fired one as fired,
// names escaped.
func TestCronPage(t *testing.T) {
	eachDriver(t, Config{}, func(t *testing.T, e *env) {
		e.Seed()
		a := e.get("cron?q=work", http.StatusOK)
		contains(t, "a queue without series", a.body, "No cron series has stored a fire")
		timers := e.d.(broker.Timers)
		next := time.Now().Add(50 * time.Second).Truncate(time.Millisecond) // fires are stored at most a minute ahead
		past := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		for _, f := range []struct {
			series string
			at     time.Time
		}{{"nightly-report", next}, {"b<i>x</i>", past}} {
			m := &broker.Message{ID: delay.FireID(f.series, f.at), Kind: "report", Queue: "work", RunAt: f.at, EnqueuedAt: time.Now()}
			if ok, err := timers.EnqueueFire(e.ctx, f.series, m, 24*time.Hour); err != nil || !ok {
				t.Fatalf("EnqueueFire(%q) = %v, %v", f.series, ok, err)
			}
		}
		// The past fire ran: its timer is gone.
		if ok, err := e.insp.Cancel(e.ctx, "work", delay.FireID("b<i>x</i>", past)); err != nil || !ok {
			t.Fatalf("Cancel of the past fire = %v, %v", ok, err)
		}
		a = e.get("cron?q=work", http.StatusOK)
		if strings.Contains(a.body, "<i>x</i>") {
			t.Error("a series name is shown unescaped")
		}
		names := regexp.MustCompile(`(?s)<tr>\s*<td>(.*?)</td>.*?<td>(next|fired)`).FindAllStringSubmatch(a.body, -1)
		var got []string
		for _, n := range names {
			got = append(got, n[1]+"="+n[2])
		}
		if want := "b&lt;i&gt;x&lt;/i&gt;=fired nightly-report=next"; strings.Join(got, " ") != want {
			t.Errorf("the cron page's series = %q, want %q", strings.Join(got, " "), want)
		}
		contains(t, "the cron page", a.body, `href="job?id=nightly-report%40`+fmt.Sprint(next.UnixMilli())+`&amp;q=work&amp;state=delayed"`)
		contains(t, "the queue's page", e.get("queue?q=work", http.StatusOK).body, `href="cron?q=work"`)
		e.get("cron?q=", http.StatusBadRequest)
	})
}
