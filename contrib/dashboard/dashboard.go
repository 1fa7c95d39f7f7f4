package dashboard

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/queueprobe"
)

// Config configures a dashboard.
type Config struct {
	// Redis is the client of the Redis holding the queues. Required. The
	// dashboard never closes it.
	Redis redis.UniversalClient
	// Prefix is the key prefix of the queues, the drivers' Config.Prefix.
	// Defaults to "conveyor".
	Prefix string
	// Group is the stream driver's consumer group, its Config.Group.
	// Defaults to "conveyor".
	Group string
	// Driver is "list" or "stream" to read every queue through that
	// driver. Defaults to "": each queue's driver is told from its keys.
	Driver string
	// ReadOnly hides every button and refuses every POST with 403.
	ReadOnly bool
	// Auth wraps the whole handler, pages, actions and stylesheet alike:
	// BasicAuth, or the app's own middleware. Defaults to nil: the app
	// authenticates before the request reaches the handler.
	Auth func(http.Handler) http.Handler
	// CSRFKey is the key of the CSRF tokens' HMAC, at least 32 bytes.
	// Defaults to 32 random bytes drawn by New: set it when several
	// replicas serve the dashboard behind one address, so that a form
	// rendered by one is accepted by another.
	CSRFKey []byte
	// Logger logs the errors of Redis the pages show. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Handler serves the dashboard. Mount it under a path of the app's own
// (http.StripPrefix): every link it renders is relative.
type Handler struct {
	set      *queueprobe.Set
	readOnly bool
	csrf     csrf
	log      *slog.Logger
	pages    map[string]*template.Template
	served   http.Handler
}

// base is what the dashboard and its metrics (NewMetrics) both take from
// cfg: the set of queues they read, the logger, and serve wrapped in
// Config.Auth. what names the caller in errors.
func base(cfg *Config, what string, serve http.HandlerFunc) (*queueprobe.Set, *slog.Logger, http.Handler, error) {
	if cfg == nil || cfg.Redis == nil {
		return nil, nil, nil, fmt.Errorf("%s: Config.Redis is required", what)
	}
	set, err := queueprobe.New(cfg.Redis, &queueprobe.Config{Prefix: cfg.Prefix, Group: cfg.Group, Driver: cfg.Driver})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var served http.Handler = serve
	if cfg.Auth != nil {
		served = cfg.Auth(served)
	}
	return set, log, served, nil
}

// New returns the dashboard cfg describes.
func New(cfg *Config) (*Handler, error) {
	h := &Handler{}
	set, log, served, err := base(cfg, "dashboard", h.route)
	if err != nil {
		return nil, err
	}
	key := cfg.CSRFKey
	switch {
	case key == nil:
		key = make([]byte, 32)
		_, _ = rand.Read(key) // never fails (crypto/rand)
	case len(key) < 32:
		return nil, fmt.Errorf("dashboard: Config.CSRFKey has %d bytes, want 32 or more", len(key))
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	*h = Handler{set: set, readOnly: cfg.ReadOnly, csrf: csrf{key: key}, log: log, pages: pages, served: served}
	return h, nil
}

// ServeHTTP serves a page, an action or the stylesheet.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	h.served.ServeHTTP(w, r)
}

// contentSecurityPolicy allows the embedded stylesheet and nothing else
// to load: no script at all, no inline style, forms posting only to the
// dashboard's own origin, and no framing.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every answer carries, a 401 included.
func secure(hd http.Header) {
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// same-origin: the dashboard's own POSTs still carry a Referer for
	// the origin check when a browser leaves Origin out.
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
}

// route dispatches on the path below the mount point: every page is at
// the top level, with its queue and job in the query, so that relative
// links work under any prefix and an ID may hold any character.
func (h *Handler) route(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	if act, ok := actions[path]; ok {
		h.act(w, r, act)
		return
	}
	page, ok := map[string]func(http.ResponseWriter, *http.Request) error{
		"":                 h.overview,
		"queue":            h.queue,
		"job":              h.job,
		"workers":          h.workers,
		"cron":             h.cron,
		"static/style.css": serveStatic,
	}[path]
	switch {
	case !ok:
		h.fail(w, r, http.StatusNotFound, errors.New("no such page"))
		return
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, http.StatusMethodNotAllowed, errors.New("pages are read with GET; actions are POSTed from their forms"))
		return
	}
	if err := page(w, r); err != nil {
		h.fail(w, r, statusOf(err), err)
	}
}

// view is what every page's template gets.
type view struct {
	Title    string
	ReadOnly bool
	// CSRF is the token the page's forms carry.
	CSRF string
	// Done says what the action that led here did, in the fixed wording
	// of actionDone; empty otherwise.
	Done string
	Page any
}

// render writes page name with data as the answer, status 200. A
// template error becomes a 500 before anything is written.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name, title string, data any) error {
	return h.renderStatus(w, r, http.StatusOK, name, title, data)
}

func (h *Handler) renderStatus(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) error {
	v := view{Title: title, ReadOnly: h.readOnly, Done: actionDone(r.URL.Query()), Page: data}
	if !h.readOnly {
		v.CSRF = h.csrf.token(w, r)
	}
	var b bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&b, "layout", v); err != nil {
		return fmt.Errorf("render %s: %w", name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
	return nil
}

// fail answers with an error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		h.log.ErrorContext(r.Context(), "dashboard", "path", r.URL.Path, "err", err)
	}
	if h.renderStatus(w, r, status, "error", http.StatusText(status), err.Error()) != nil {
		http.Error(w, http.StatusText(status), status)
	}
}

// statusOf maps the errors of the pages and actions to a status.
func statusOf(err error) int {
	var bad badRequest
	switch {
	case errors.Is(err, errNotFound), errors.Is(err, queueprobe.ErrUnknownQueue):
		return http.StatusNotFound
	case errors.As(err, &bad), errors.Is(err, queueprobe.ErrDriver):
		return http.StatusBadRequest
	case errors.Is(err, broker.ErrJobsInFlight):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// errNotFound marks a job or timer that is not there.
var errNotFound = errors.New("not found")

// badRequest is an error in the request's parameters.
type badRequest string

func (e badRequest) Error() string { return string(e) }
