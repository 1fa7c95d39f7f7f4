package devredis

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/broker/pubsub"
	"github.com/conveyorq/conveyor/broker/stream"
)

// On the embedded Redis every driver's start-up check reads the server's
// version (miniredis answers HELLO, not INFO server) and logs no warning:
// an example's first screen carries the in-memory banner and nothing else.
func TestEmbeddedDriversCheckWithoutWarning(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c, cleanup, err := connect(ctx, nil, options{probeAddr: closedAddr(t), stderr: &syncBuffer{}, tick: time.Millisecond})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(cleanup)
	prefix := "devredis-check-" + strings.ToLower(t.Name())
	type checker interface{ Check(context.Context) error }
	for name, open := range map[string]func(*slog.Logger) (checker, error){
		"list": func(l *slog.Logger) (checker, error) {
			return list.New(c, &list.Config{Prefix: prefix, Logger: l})
		},
		"stream": func(l *slog.Logger) (checker, error) {
			return stream.New(c, &stream.Config{Prefix: prefix, Logger: l})
		},
		"pubsub": func(l *slog.Logger) (checker, error) {
			return pubsub.New(c, &pubsub.Config{Logger: l})
		},
	} {
		var logs syncBuffer
		d, err := open(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := d.Check(ctx); err != nil {
			t.Errorf("%s: Check on the embedded Redis: %v", name, err)
		}
		if l := logs.String(); strings.Contains(l, "level=WARN") || !strings.Contains(l, "version read from HELLO") {
			t.Errorf("%s: Check logged a warning, or did not read the version from HELLO:\n%s", name, l)
		}
	}
}

// helperEnv, when set, makes the test binary act as an example's main
// (see TestConnectHelperProcess).
const helperEnv = "DEVREDIS_TEST_HELPER"

// TestConnectHelperProcess is not a test: run by startupStderr in a child
// process, it does what an example's main does with Connect's error, so
// the child's stderr is what a user sees, go-redis's own logger included.
func TestConnectHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper process for TestConnectErrorIsOneLine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, cleanup, err := Connect(ctx, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
	cleanup()
	os.Exit(0)
}

// startupStderr runs the helper process with REDIS_URL set to url and
// returns its stderr.
func startupStderr(t *testing.T, url string) string {
	t.Helper()
	cmd := exec.CommandContext(testCtx(t), os.Args[0], "-test.run=^TestConnectHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", EnvURL+"="+url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("helper with %s=%s: %v, want exit status 1; stderr:\n%s", EnvURL, url, err, stderr.String())
	}
	return stderr.String()
}

// An example started with a REDIS_URL nothing answers, or one that is not a
// URL, prints one line: Connect's error, with no go-redis dial log before
// it.
func TestConnectErrorIsOneLine(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	for _, c := range []struct {
		url  string
		want *regexp.Regexp
	}{
		{"redis://:secret@" + addr + "/0", regexp.MustCompile(`^example: cannot reach Redis at ` + regexp.QuoteMeta(addr) +
			` \(REDIS_URL\): dial tcp ` + regexp.QuoteMeta(addr) + `: connect: connection refused; start one with: redis-server --port ` + port +
			`; unset REDIS_URL to run on an embedded in-memory Redis instead\n$`)},
		{"notaurl", regexp.MustCompile(`^example: REDIS_URL "notaurl" is not a Redis URL: want redis://host:port/db or rediss://host:port/db\n$`)},
	} {
		if got := startupStderr(t, c.url); !c.want.MatchString(got) {
			t.Errorf("REDIS_URL=%s: stderr\n%s\nwant one line matching %s", c.url, got, c.want)
		}
	}
}
