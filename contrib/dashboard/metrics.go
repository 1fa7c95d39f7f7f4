package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/queueprobe"
)

// Metrics serves the figures of every queue and of the worker fleet, read
// from Redis at each scrape, in the Prometheus text exposition format
// (version 0.0.4). `conveyor dash` serves it at /metrics; an app mounts it
// where it likes, as it mounts the dashboard.
//
// It exports what Redis holds rather than the OpenTelemetry instruments
// of contrib/otelconveyor: those live in the processes that run the
// pools, and their own OpenTelemetry pipeline exports them. A process
// that serves Metrics runs no job, so what it can report is the
// fleet-wide state in Redis, read through conveyor.Inspector; every
// replica serving it reports the same figures, and it needs neither the
// Prometheus client library nor the OpenTelemetry exporter.
//
// The metrics follow. A queue's series carry the labels queue and driver,
// the driver its figures were read through: Config.Driver when set, else
// the one its keys name, or list for a queue whose keys name none (it
// holds only timers, discard records or counters, which both read alike).
//
//	conveyor_queue_depth{queue,driver,state}        gauge: jobs per state, ready, in_flight, delayed, discarded
//	conveyor_queue_paused{queue,driver}             gauge: 1 while the queue is paused, else 0
//	conveyor_queue_processed_total{queue,driver}    counter: jobs acked
//	conveyor_queue_failed_total{queue,driver}       counter: handler runs that ended in a retry or a discard
//	conveyor_queue_discards_dropped_total{queue,driver,reason}
//	                                                counter: discard records dropped by retention, reason count or age
//	conveyor_workers                                gauge: live worker pools
//	conveyor_workers_concurrency                    gauge: the live pools' concurrency, summed
//	conveyor_workers_running_jobs                   gauge: the jobs they run, as of their last beat
//	conveyor_scrape_duration_seconds                gauge: how long this scrape's Redis reads took
//
// conveyor_queue_depth is the figure otelconveyor's conveyor.queue.depth
// observes, under the name the OpenTelemetry exporter would give it. The
// counters are the queues' own, kept in Redis since each queue began: they
// do not restart with a process, and go back to zero only when the queue
// is deleted, which Prometheus reads as a counter reset.
//
// Cost: each scrape reads what the dashboard's overview reads (the queue
// registry, one pipeline of O(1) reads per queue and one script call per
// queue) and the worker registry (one SSCAN and one MGET per 500 pools).
// Nothing is cached or polled between scrapes. A scrape that cannot read
// Redis is answered with 500 and the error in plain text, so that
// Prometheus marks the target down (its up series is 0) rather than
// reading stale or partial figures.
//
// Only GET and HEAD are served; any other method gets 405. Config.Auth
// wraps it as it wraps the dashboard, and a scraper sends the same
// credentials: BasicAuth takes a token as a Bearer token, which is
// Prometheus's authorization setting, or as a basic-auth password.
type Metrics struct {
	set    *queueprobe.Set
	log    *slog.Logger
	served http.Handler
}

// NewMetrics returns the metrics of the queues cfg describes. It reads
// cfg's Redis, Prefix, Group, Driver, Auth and Logger as New does, and
// ignores the rest: the metrics change nothing and have no form.
func NewMetrics(cfg *Config) (*Metrics, error) {
	m := &Metrics{}
	set, log, served, err := base(cfg, "dashboard: metrics", m.serve)
	if err != nil {
		return nil, err
	}
	*m = Metrics{set: set, log: log, served: served}
	return m, nil
}

// ServeHTTP answers a scrape.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	m.served.ServeHTTP(w, r)
}

// exposition is the Content-Type of the text format the metrics are in.
const exposition = "text/plain; version=0.0.4; charset=utf-8"

func (m *Metrics) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed: metrics are read with GET", http.StatusMethodNotAllowed)
		return
	}
	b, err := m.collect(r.Context())
	if err != nil {
		m.log.ErrorContext(r.Context(), "dashboard metrics", "path", r.URL.Path, "err", err)
		http.Error(w, "conveyor metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", exposition)
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	_, _ = w.Write(b.Bytes())
}

// collect reads the figures and writes them out, every family's samples
// together as the format requires; an error leaves nothing written.
func (m *Metrics) collect(ctx context.Context) (*exposer, error) {
	start := time.Now()
	queues, err := m.set.Overview(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the queues: %w", err)
	}
	workers, err := m.set.Shared().Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the workers: %w", err)
	}
	took := time.Since(start)

	drivers := make([]string, len(queues))
	for k, q := range queues {
		if drivers[k], err = m.set.DriverOf(q.Queue, false); err != nil {
			return nil, err
		}
	}
	e := &exposer{}
	e.family("conveyor_queue_depth", "gauge", "Jobs of a queue in each state: ready, in_flight, delayed, discarded, grouped (waiting in their FIFO groups' lines) and limited (waiting for a concurrency limit's slot).")
	for k, q := range queues {
		for _, s := range []struct {
			state string
			n     int64
		}{{"ready", q.Ready}, {"in_flight", q.InFlight}, {"delayed", q.Delayed}, {"discarded", q.Discarded}, {"grouped", q.Grouped}, {"limited", q.Limited}} {
			e.sample("conveyor_queue_depth", s.n, "queue", q.Name, "driver", drivers[k], "state", s.state)
		}
	}
	e.family("conveyor_queue_paused", "gauge", "1 while the queue is paused (no pool fetches from it), else 0.")
	for k, q := range queues {
		paused := int64(0)
		if q.Paused {
			paused = 1
		}
		e.sample("conveyor_queue_paused", paused, "queue", q.Name, "driver", drivers[k])
	}
	e.family("conveyor_queue_processed_total", "counter", "Jobs of the queue acked, since the queue began.")
	for k, q := range queues {
		e.sample("conveyor_queue_processed_total", q.Processed, "queue", q.Name, "driver", drivers[k])
	}
	e.family("conveyor_queue_failed_total", "counter", "Handler runs of the queue that ended in a retry or a discard, since the queue began.")
	for k, q := range queues {
		e.sample("conveyor_queue_failed_total", q.Failed, "queue", q.Name, "driver", drivers[k])
	}
	e.family("conveyor_queue_discards_dropped_total", "counter",
		"Discard records retention dropped, because the queue held too many (reason count) or they were too old (reason age).")
	for k, q := range queues {
		e.sample("conveyor_queue_discards_dropped_total", q.Discards.DroppedByCount, "queue", q.Name, "driver", drivers[k], "reason", "count")
		e.sample("conveyor_queue_discards_dropped_total", q.Discards.DroppedByAge, "queue", q.Name, "driver", drivers[k], "reason", "age")
	}
	var concurrency, running int64
	for _, w := range workers {
		concurrency += int64(w.Concurrency)
		running += int64(w.RunningTotal)
	}
	e.family("conveyor_workers", "gauge", "Live worker pools in the fleet's registry.")
	e.sample("conveyor_workers", int64(len(workers)))
	e.family("conveyor_workers_concurrency", "gauge", "Jobs the live worker pools may run at once, summed.")
	e.sample("conveyor_workers_concurrency", concurrency)
	e.family("conveyor_workers_running_jobs", "gauge", "Jobs the live worker pools run, as of each pool's last beat.")
	e.sample("conveyor_workers_running_jobs", running)
	e.family("conveyor_scrape_duration_seconds", "gauge", "How long the Redis reads of this scrape took.")
	e.line("conveyor_scrape_duration_seconds", strconv.FormatFloat(took.Seconds(), 'g', -1, 64))
	return e, nil
}

// exposer writes the text format.
type exposer struct{ bytes.Buffer }

// family starts the samples of metric name, of type kind.
func (e *exposer) family(name, kind, help string) {
	fmt.Fprintf(e, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, kind)
}

// sample writes one sample of metric name with the labels given, name
// then value.
func (e *exposer) sample(name string, v int64, labels ...string) {
	e.line(name, strconv.FormatInt(v, 10), labels...)
}

func (e *exposer) line(name, v string, labels ...string) {
	e.WriteString(name)
	for k := 0; k+1 < len(labels); k += 2 {
		if k == 0 {
			e.WriteByte('{')
		} else {
			e.WriteByte(',')
		}
		e.WriteString(labels[k])
		e.WriteString(`="`)
		e.WriteString(escapeLabel(labels[k+1]))
		e.WriteByte('"')
	}
	if len(labels) > 1 {
		e.WriteByte('}')
	}
	e.WriteByte(' ')
	e.WriteString(v)
	e.WriteByte('\n')
}

// labelEscaper escapes a label value as the format asks: backslash,
// double quote and line feed. Queue names cannot hold a line feed
// (broker.ValidateQueue), but the registry is read as it is.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// escapeLabel returns s as a label value's text, invalid UTF-8 replaced:
// the format is UTF-8 and a scraper rejects the whole answer otherwise.
func escapeLabel(s string) string {
	return labelEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD"))
}

// escapeHelp escapes a HELP line's text: backslash and line feed.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
