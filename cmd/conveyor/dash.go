package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/conveyorq/conveyor/contrib/dashboard"
)

var dashSpec = spec{
	name:     "dash",
	synopsis: "dash [-listen addr] [-read-only] [-no-auth] [-metrics=false] [flags]",
	about: `Serves the web dashboard (contrib/dashboard) over HTTP: the queues with their
jobs per state, each queue's jobs page by page with search by ID, a job's
headers and payload, the discard queue with re-drive and purge, cancel of
timers, pause and resume, and the live worker pools. It stops on Ctrl-C.

At /metrics it serves the same figures to Prometheus (text format 0.0.4),
read from Redis at each scrape: conveyor_queue_depth per queue and state,
conveyor_queue_paused, the counters conveyor_queue_processed_total,
conveyor_queue_failed_total and conveyor_queue_discards_dropped_total, and
the worker fleet's conveyor_workers (live pools), conveyor_workers_concurrency
and conveyor_workers_running_jobs. Every replica reports the same fleet-wide
figures. A scrape that cannot read Redis gets 500, so the target
shows as down. -metrics=false leaves /metrics out.

It needs credentials from the environment: CONVEYOR_DASH_TOKEN (sent as
"Authorization: Bearer <token>", or as the password of basic auth under any
user name), or CONVEYOR_DASH_USER and CONVEYOR_DASH_PASSWORD (basic auth; a
browser asks for them). Without them it refuses to start, unless -no-auth
is given and -listen is a loopback address. It serves plain HTTP: put it
behind a TLS-terminating proxy to reach it from another machine.

Credentials guard /metrics too: give Prometheus the token (its
authorization setting) or the user and password (basic_auth).

Cost: each page view costs what docs/dashboard.md lists (the overview: the
queue registry, one pipeline of O(1) reads per queue and one script call
per queue; a queue's page: one script call for its figures and one for a
page of jobs). A scrape of /metrics costs the overview's reads and one
SSCAN and one MGET per 500 worker pools. Nothing polls Redis between
requests.`,
}

// dashFlags are the flags of dash.
type dashFlags struct {
	listen   string
	readOnly bool
	noAuth   bool
	metrics  bool
}

func (f *dashFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on, host:port")
	fs.BoolVar(&f.readOnly, "read-only", false, "show no buttons and refuse every change")
	fs.BoolVar(&f.noAuth, "no-auth", false, "serve without credentials; only with a loopback -listen address")
	fs.BoolVar(&f.metrics, "metrics", true, "serve Prometheus metrics at /metrics, behind the same credentials")
}

func runDash(ctx context.Context, args []string, std stdio) error {
	return dash(ctx, args, std, os.Getenv)
}

// dash is runDash with the environment read through getenv.
func dash(ctx context.Context, args []string, std stdio, getenv func(string) string) error {
	var f dashFlags
	s := dashSpec
	s.flags = f.add
	var auth func(http.Handler) http.Handler
	inv, err := s.parse(args, std)
	if err != nil {
		return err
	}
	creds := &dashboard.Credentials{Token: getenv("CONVEYOR_DASH_TOKEN"), User: getenv("CONVEYOR_DASH_USER"), Password: getenv("CONVEYOR_DASH_PASSWORD")}
	given := *creds != dashboard.Credentials{}
	switch {
	case f.noAuth && given:
		return inv.usagef("-no-auth with CONVEYOR_DASH_* credentials set: drop one or the other")
	case f.noAuth && !loopback(f.listen):
		return inv.usagef("-no-auth serves anyone who can reach -listen %q: use a loopback address (127.0.0.1, ::1, localhost) or set credentials", f.listen)
	case !f.noAuth:
		if auth, err = dashboard.BasicAuth(creds); err != nil {
			return inv.usagef("no credentials: set CONVEYOR_DASH_TOKEN, or CONVEYOR_DASH_USER and CONVEYOR_DASH_PASSWORD (or pass -no-auth on a loopback -listen address)")
		}
	}
	rdb, err := inv.t.dial(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	cfg := &dashboard.Config{Redis: rdb, Prefix: inv.t.prefix, Group: inv.t.group, Driver: inv.t.driver, ReadOnly: f.readOnly, Auth: auth}
	h, err := dashboard.New(cfg)
	if err != nil {
		return err
	}
	var handler http.Handler = h
	if f.metrics {
		m, err := dashboard.NewMetrics(cfg)
		if err != nil {
			return err
		}
		// Not a ServeMux: it would redirect unclean paths before the
		// dashboard's own headers and authentication see them.
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				m.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	mode := ""
	if f.readOnly {
		mode = ", read-only"
	}
	if f.noAuth {
		mode += ", without authentication"
	}
	if f.metrics {
		mode = fmt.Sprintf(", metrics at http://%s/metrics", ln.Addr()) + mode
	}
	fmt.Fprintf(std.err, "Serving the dashboard of prefix %q on http://%s/%s. Ctrl-C stops it.\n", inv.t.prefix, ln.Addr(), mode)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(stop); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// loopback reports whether addr (host:port) listens on a loopback
// address only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
