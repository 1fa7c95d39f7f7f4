package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestHelp: `conveyor help` lists every command; each operator command's
// help says what it does and costs, and so does -h.
func TestHelp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	runHelp := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(ctx, args, stdio{in: strings.NewReader(""), out: &stdout, err: &stderr})
		return code, stdout.String(), stderr.String()
	}
	code, out, _ := runHelp("help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	for _, c := range commands {
		if f := fields(out, c.name); len(f) < 2 || !strings.Contains(out, c.summary) {
			t.Errorf("help lacks %s and its summary:\n%s", c.name, out)
		}
		if c.name == "bench" {
			continue
		}
		for _, args := range [][]string{{"help", c.name}, {c.name, "-h"}} {
			code, _, help := runHelp(args...)
			if code != 0 {
				t.Errorf("conveyor %q: exit %d", args, code)
			}
			for _, want := range []string{"Usage: conveyor " + c.name, "Cost:", "-redis", "-prefix", "-json"} {
				if !strings.Contains(help, want) {
					t.Errorf("conveyor %q lacks %q:\n%s", args, want, help)
				}
			}
			if regexp.MustCompile(`#\d|(?i)issue`).MatchString(help) {
				t.Errorf("conveyor %q speaks of the project's history:\n%s", args, help)
			}
		}
	}
}

// TestUsageAndConnectionErrors: bad flags exit 2 in one line and an
// unreachable Redis exits 1, saying so.
func TestUsageAndConnectionErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"queues", "-nosuch"}, 2, "flag provided but not defined: -nosuch"},
		{[]string{"queues", "-redis", "http://x"}, 2, `-redis "http://x" is not a Redis URL`},
		{[]string{"queues", "-prefix", "a{b}"}, 2, "-prefix"},
		{[]string{"queues", "extra"}, 2, "unexpected arguments"},
		{[]string{"queues", "-redis", "redis://127.0.0.1:1/0"}, 1, "cannot reach Redis at 127.0.0.1:1"},
		{[]string{"stats", "q", "-redis", "redis://127.0.0.1:1/0"}, 1, "cannot reach Redis"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, c.args, stdio{in: strings.NewReader(""), out: &stdout, err: &stderr})
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("conveyor %q: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
		// A bad URL, often REDIS_URL's, is one line; other usage errors
		// add where to find help.
		lines := 2
		if c.args[1] == "-redis" {
			lines = 1
		}
		if c.code == 2 && strings.Count(stderr.String(), "\n") != lines {
			t.Errorf("conveyor %q: usage error in %d lines, want the error and where to find help:\n%s", c.args, strings.Count(stderr.String(), "\n"), stderr.String())
		}
	}
}
