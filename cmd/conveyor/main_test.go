package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		args     []string
		code     int
		out, err string // substrings of stdout and stderr
	}{
		{args: nil, code: 2, err: "Usage:"},
		{args: []string{"help"}, code: 0, out: "bench"},
		{args: []string{"-h"}, code: 0, out: "Commands:"},
		{args: []string{"help", "bench"}, code: 0, err: "enqueue-parallel"},
		{args: []string{"bench", "-h"}, code: 0, err: "-concurrency"},
		{args: []string{"nosuch"}, code: 2, err: `unknown command "nosuch"`},
		{args: []string{"bench", "-driver", "pubsub"}, code: 2, err: "-driver"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, c.args, stdio{in: strings.NewReader(""), out: &stdout, err: &stderr})
		if code != c.code {
			t.Errorf("conveyor %q: exit %d, want %d (stderr %s)", c.args, code, c.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), c.out) {
			t.Errorf("conveyor %q: stdout %q lacks %q", c.args, stdout.String(), c.out)
		}
		if !strings.Contains(stderr.String(), c.err) {
			t.Errorf("conveyor %q: stderr %q lacks %q", c.args, stderr.String(), c.err)
		}
	}
}
