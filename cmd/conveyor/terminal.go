package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// isTerminal reports whether v is a terminal: an *os.File on a character
// device.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// errAborted is the answer no to a confirmation: exit status 1.
var errAborted = errors.New("aborted")

// confirm asks on the terminal whether to do what question says, unless
// yes (-yes was given). Without a terminal on stdin there is no one to
// ask: it refuses, as a usage error, saying to pass -yes.
func (inv *invocation) confirm(yes bool, question string) error {
	if yes {
		return nil
	}
	if !isTerminal(inv.std.in) {
		return inv.usagef("not confirmed: stdin is not a terminal, so there is no one to ask; pass -yes to go ahead")
	}
	fmt.Fprintf(inv.std.err, "%s [y/N] ", question)
	answer, err := bufio.NewReader(inv.std.in).ReadString('\n')
	switch {
	case errors.Is(err, io.EOF) && answer == "":
		// A character device that is no terminal (/dev/null) ends here.
		fmt.Fprintln(inv.std.err)
		return inv.usagef("not confirmed: no answer (stdin is closed); pass -yes to go ahead")
	case err != nil && !errors.Is(err, io.EOF):
		return err
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return errAborted
}

// progressWriter returns w on a terminal, where a progress line redrawn
// in place with "\r" reads well, and otherwise (a log, a pipe) a
// lineWriter on w.
func progressWriter(w io.Writer) io.Writer {
	if isTerminal(w) {
		return w
	}
	return &lineWriter{w: w, every: time.Second, now: time.Now}
}

// lineWriter turns progress drawn for a terminal into plain lines for a
// log. A write is a list of "\r"-separated parts: the text of each part
// that ends a line is written at once; a part that does not (a progress
// line to be redrawn) is written, as a line, only when every has passed
// since the last such line; parts that are blank (a line cleared) are
// dropped.
type lineWriter struct {
	w     io.Writer
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last time.Time
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out strings.Builder
	for part := range strings.SplitSeq(string(p), "\r") {
		text, ends := strings.CutSuffix(part, "\n")
		text = strings.TrimRight(text, " ")
		switch {
		case ends:
			out.WriteString(text + "\n")
		case text == "":
		case l.last.IsZero() || l.now().Sub(l.last) >= l.every:
			l.last = l.now()
			out.WriteString(text + "\n")
		}
	}
	if _, err := io.WriteString(l.w, out.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// progress shows how far a long command has gone on stderr: a bar redrawn
// in place on a terminal, plain lines at most once a second otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	verb  string // "re-driven", "purged"
	total int
}

func newProgress(stderr io.Writer, verb string, total int) *progress {
	return &progress{w: progressWriter(stderr), tty: isTerminal(stderr), verb: verb, total: total}
}

// show draws done out of the total.
func (p *progress) show(done int) {
	if !p.tty {
		fmt.Fprintf(p.w, "\r%s %d of at most %d", p.verb, done, p.total)
		return
	}
	const width = 30
	full := width
	if p.total > 0 {
		full = min(width, done*width/p.total)
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d %s", strings.Repeat("#", full), strings.Repeat(".", width-full), done, p.total, p.verb)
}

// end clears the bar on a terminal; elsewhere it writes the last count.
func (p *progress) end(done int) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%-60s\r", "")
		return
	}
	fmt.Fprintf(p.w, "%s %d\n", p.verb, done)
}
