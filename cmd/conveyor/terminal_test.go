package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestLineWriter: progress redrawn with "\r" becomes plain lines, at most
// one a second, with finished lines and errors always written and cleared
// lines dropped.
func TestLineWriter(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	w := &lineWriter{w: &out, every: time.Second, now: func() time.Time { return now }}
	write := func(s string) {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	write("\rlabel: 1/10 (5/s)        ")
	now = now.Add(250 * time.Millisecond)
	write("\rlabel: 2/10 (5/s)        ") // under a second after the last: dropped
	now = now.Add(time.Second)
	write("\rlabel: 7/10 (5/s)        ")
	write("\r" + strings.Repeat(" ", 78) + "\r")
	write("\rworkload failed: boom\n") // never dropped
	write("done 10\n")
	want := "label: 1/10 (5/s)\nlabel: 7/10 (5/s)\nworkload failed: boom\ndone 10\n"
	if out.String() != want {
		t.Errorf("lines = %q, want %q", out.String(), want)
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) || isTerminal(nil) {
		t.Error("a file, a buffer or nil taken for a terminal")
	}
	if pw := progressWriter(&bytes.Buffer{}); pw == nil {
		t.Error("no progress writer")
	} else if _, ok := pw.(*lineWriter); !ok {
		t.Errorf("progress writer of a buffer is %T, want plain lines", pw)
	}
}

// TestBenchProgressIsPlainOffTerminal: bench's progress on a stderr that is
// no terminal comes as lines, with no "\r".
func TestBenchProgressIsPlainOffTerminal(t *testing.T) {
	t.Parallel()
	url := cliRedisURL(t)
	var stdout, stderr bytes.Buffer
	err := runBench(context.Background(), []string{"-driver", "list", "-workload", "idle", "-idle", "600ms",
		"-redis", url, "-prefix", redistest.Prefix(t)}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\nstderr: %s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "\r") || !strings.Contains(stderr.String(), "idle") {
		t.Errorf("bench progress = %q, want plain lines", stderr.String())
	}
}
