// Package dashboard is Conveyor's web dashboard: an http.Handler an app
// mounts under its own router and middleware, as net/http/pprof is
// mounted, or that `conveyor dash` serves on its own. It reads and
// repairs the queues of the durable drivers (list, stream) through
// conveyor.Inspector: the queues with their jobs per state, one queue's
// jobs page by page with search by ID, a job's headers and payload, the
// discard queue with re-drive and purge, the records of finished jobs
// (outcome, times, worker, error, result) where they are kept, cancel of
// timers, pause and resume, and the live worker pools with their running
// jobs.
//
//	dash, err := dashboard.New(&dashboard.Config{Redis: rdb, Prefix: "conveyor"})
//	if err != nil { ... }
//	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", requireAdmin(dash)))
//
// Every link and form target it renders is relative, and every page
// sits at the top level (queue names and job IDs travel in the query),
// so it works under any path prefix, behind http.StripPrefix or a proxy
// that strips the prefix.
//
// # Authentication
//
// The handler does not authenticate: Config.Auth wraps it in the app's
// own middleware, or in BasicAuth (a token as a Bearer token or basic-auth
// password, or a user and password, compared in constant time; 401 with
// a Basic challenge otherwise).
//
// # Changes, CSRF and the origin check
//
// A GET never changes anything. Every change is a POST from a form, and
// is refused with 403 when the dashboard is read-only (Config.ReadOnly,
// which also hides the buttons), when its Origin header (or, without one,
// its Referer) does not name the request's own host, or when its CSRF
// token is missing or wrong. The token is a signed double-submit cookie:
// the browser holds a random secret in an HttpOnly, SameSite=Strict
// cookie and each form carries HMAC-SHA256(key, secret, Authorization
// header), the key being the handler's own (random per handler unless
// Config.CSRFKey sets it). It needs no server-side session, so it works
// with whatever authentication the app puts in front; the HMAC keeps a
// cookie planted by a sibling subdomain from being paired with a token
// the attacker made up, and binding the credential makes a token useless
// with another user's credential. A restart with a random key makes the
// open pages' forms stale: reload and send again.
//
// # Headers and escaping
//
// Every answer carries a Content-Security-Policy allowing only the
// embedded stylesheet (no script, no inline style, forms to the same
// origin, no framing), X-Content-Type-Options: nosniff, X-Frame-Options:
// DENY, Referrer-Policy: same-origin and Cache-Control: no-store. Pages
// are html/template, so payloads, reasons, headers, records' errors and
// results, queue and kind names are escaped where they appear. The pages need no JavaScript.
//
// docs/dashboard.md says what each page costs Redis.
//
// NewMetrics serves the queues' figures in the Prometheus text format, read
// from Redis at each scrape; conveyor dash mounts it at /metrics.
package dashboard
