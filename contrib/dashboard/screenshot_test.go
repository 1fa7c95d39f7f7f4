package dashboard

import (
	"bytes"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/conveyorq/conveyor/broker"
)

// screenshotsEnv names the directory TestScreenshots writes its pictures
// to, such as docs/images (make screenshots); a temporary one otherwise.
const screenshotsEnv = "CONVEYOR_SCREENSHOTS"

// TestScreenshots takes the pictures docs/dashboard.md shows, of pages
// seeded as the docs describe them, in chromium 1280 pixels wide: the
// overview and a queue with an hour of history, a job whose payload is a
// script, a queue's finished jobs and a finished job's record. Each must
// be a PNG of that width.
func TestScreenshots(t *testing.T) {
	t.Parallel()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	b := startBrowser(t)
	e := newEnv(t, "list", Config{})
	base := e.srv.URL + mount + "/"
	e.Seed()
	e.writeHistory("work", 60, 600)
	e.SeedFinished("done")
	msg := &broker.Message{ID: "h1", Kind: "order.note", Queue: "work", Payload: []byte(`<script>alert(1)</script>`),
		Headers: map[string]string{"x-source": "support"}, EnqueuedAt: time.Now()}
	if err := e.d.Enqueue(e.ctx, []*broker.Message{msg}); err != nil {
		t.Fatal(err)
	}
	const width = 1280
	for _, s := range []struct{ file, path string }{
		{"dashboard-queues.png", ""},
		{"dashboard-queue.png", "queue?q=work"},
		{"dashboard-job.png", "job?q=work&id=h1"},
		{"dashboard-finished.png", "queue?q=done&state=finished"},
		{"dashboard-record.png", "job?q=done&id=bad1&state=finished"},
	} {
		// A tab per picture: a tab's life is bounded by browserWait, which
		// five full-page pictures outlasted under a full make test.
		tb := b.tab(t, "", "")
		if _, err := chromedp.Run(tb.ctx, chromedp.EmulateViewport(width, 900)); err != nil {
			t.Fatal(err)
		}
		if resp := tb.navigate(base + s.path); resp.Status != http.StatusOK {
			t.Fatalf("%s: status %d", s.path, resp.Status)
		}
		shot, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s: %v", s.path, err)
		}
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatalf("%s: the screenshot is not a PNG: %v", s.path, err)
		}
		if w := img.Bounds().Dx(); w != width {
			t.Errorf("%s: the screenshot is %d pixels wide, want %d", s.path, w, width)
		}
		if err := os.WriteFile(filepath.Join(dir, s.file), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
