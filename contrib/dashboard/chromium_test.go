package dashboard

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromiumNames are the programs the browser tests look for on PATH, in
// order.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// browserWait bounds every wait of a browser test: the start of the
// browser, each tab's work, the browser's close.
const browserWait = 20 * time.Second

// browser is a headless chromium shared by the subtests of one test; each
// works in a tab of its own (see tab).
type browser struct {
	ctx context.Context
}

// startBrowser starts a headless chromium (--headless --no-sandbox
// --disable-gpu) whose files, its profile and its crash handler's, are all
// in a temporary directory, and closes it when t ends, failing t if a
// process of it outlives it. A machine without chromium fails t, saying
// how to install it.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	var path string
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatalf("the dashboard's browser tests need chromium, and none of %q is on PATH.\n"+
			"Install it: `apt-get install chromium` as root (Debian, Ubuntu), or run `make test`,\n"+
			"which installs it when it is missing and it runs as root or with passwordless sudo\n"+
			"(unless CONVEYOR_NO_INSTALL is set)", chromiumNames)
	}
	// Registered first, so removed last: after every process using it.
	dir := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		// Where the crash handler keeps its reports, ~/.config otherwise.
		chromedp.Env("XDG_CONFIG_HOME="+filepath.Join(dir, "config")))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		closing, stop := context.WithTimeout(ctx, browserWait)
		defer stop()
		// Cancel closes the browser and returns once it has exited.
		if err := chromedp.Cancel(closing); err != nil {
			t.Errorf("closing the browser: %v", err)
		}
		cancel()
		cancelAlloc()
		if left := waitGone(dir, browserWait); len(left) > 0 {
			t.Errorf("chromium processes %v were still running %v after the browser closed; killing them", left, browserWait)
			for _, pid := range left {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
	})
	// The first Do starts the browser and ties it to ctx, which must
	// outlive this call: bound the start from outside instead.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting %s: %v", path, err)
		}
	case <-time.After(browserWait):
		t.Fatalf("starting %s: no answer in %v", path, browserWait)
	}
	return &browser{ctx: ctx}
}

// waitGone waits up to limit until no live process uses dir, and returns
// those that still do. Chromium's children and its crash handler exit on
// their own once it has, and they are not this process's children: /proc
// is all there is to watch.
func waitGone(dir string, limit time.Duration) []int {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(limit)
	for {
		left := processesUsing(dir)
		if len(left) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-timeout:
			return left
		}
	}
}

// processesUsing lists the live processes whose command line names a file
// under dir (on Linux; elsewhere none). Every process of the browser
// does: its --user-data-dir, or its crash handler's --database.
func processesUsing(dir string) []int {
	want := []byte(dir + string(filepath.Separator))
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie's command line is empty: it has exited.
		if cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cmdline, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// tab is a browser tab in a browser context of its own, so that no cookie
// or cached credential passes from one test to another. It answers HTTP
// auth challenges as a person at the browser's dialog would: with its
// user and password, or by cancelling when it has none. It dismisses any
// JavaScript dialog, keeping what each said.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	challenges []fetch.AuthChallenge
	dialogs    []string
}

// tab opens a tab that ends with t; user "" cancels every auth challenge.
func (b *browser) tab(t *testing.T, user, password string) *tab {
	t.Helper()
	tabCtx, closeTab := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	ctx, cancel := context.WithTimeout(tabCtx, browserWait)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		closeTab()
		wg.Wait()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	tb := &tab{t: t, ctx: ctx}
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	auths := chromedp.Events(ctx, fetch.AuthRequired)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	// Errors of these calls mean the tab is closing: the test is over.
	wg.Go(func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	})
	wg.Go(func() {
		for ev, err := range auths {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.challenges = append(tb.challenges, *ev.AuthChallenge)
			tb.mu.Unlock()
			answer := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
			if user != "" {
				answer = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: user, Password: password}
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: answer})
		}
	})
	wg.Go(func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			// Kept before the dismissal, which the page waits for: a
			// dialog opened while a page loaded is in the list by the
			// time the load is over.
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, string(ev.Type)+": "+ev.Message)
			tb.mu.Unlock()
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	})
	handleAuth := true
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handleAuth}); err != nil {
		t.Fatalf("Fetch.enable: %v", err)
	}
	return tb
}

// navigate loads url as if typed in the address bar and returns the
// response of its document, after the page's load event.
func (tb *tab) navigate(url string) *network.Response {
	tb.t.Helper()
	resp, err := chromedp.Run(tb.ctx, chromedp.NavigateResponse(url))
	if err != nil {
		tb.t.Fatalf("loading %s: %v", url, err)
	}
	return resp
}

// click clicks the element the XPath expression xpath selects (a link or
// a button, found by its text as a person finds it), waits for the page it
// leads to to load, and fails the test unless that page's status is 200.
func (tb *tab) click(xpath string) {
	tb.t.Helper()
	resp, err := chromedp.RunResponse(tb.ctx, chromedp.Click(chromedp.Search(xpath)))
	if err != nil {
		tb.t.Fatalf("clicking %s: %v", xpath, err)
	}
	if resp.Status != 200 {
		tb.t.Fatalf("clicking %s led to %s: status %d", xpath, resp.URL, resp.Status)
	}
}

// location is the URL of the page shown.
func (tb *tab) location() string {
	tb.t.Helper()
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil {
		tb.t.Fatal(err)
	}
	return loc
}

// text is the text the page shows in the first element sel selects,
// once it is visible.
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		tb.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// evalJS evaluates js in the page (DevTools' evaluation, which the page's
// CSP does not restrict) and decodes its value into a T.
func evalJS[T any](tb *tab, js string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		tb.t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// cells is the text of the cells of column col (from 0) of the rows of
// the page's table(s) in main, trimmed.
func (tb *tab) cells(col int) []string {
	tb.t.Helper()
	return evalJS[[]string](tb, `Array.from(document.querySelectorAll("main tbody tr"), tr => tr.cells[`+strconv.Itoa(col)+`].innerText.trim())`)
}

// seen returns the auth challenges answered and the dialogs dismissed so
// far.
func (tb *tab) seen() ([]fetch.AuthChallenge, []string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]fetch.AuthChallenge(nil), tb.challenges...), append([]string(nil), tb.dialogs...)
}
