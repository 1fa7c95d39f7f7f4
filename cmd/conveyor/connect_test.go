package main

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// cliHelperEnv, when set, makes the test binary run as the conveyor
// command with the arguments it holds, split on spaces (see
// TestCLIHelperProcess).
const cliHelperEnv = "CONVEYOR_TEST_CLI_ARGS"

// TestCLIHelperProcess is not a test: run by runCLI in a child process, it
// runs main, so the child's stderr is all a user sees, go-redis's own
// logger included.
func TestCLIHelperProcess(t *testing.T) {
	args := os.Getenv(cliHelperEnv)
	if args == "" {
		t.Skip("helper process for TestConnectFailsInOneLine")
	}
	os.Args = append([]string{"conveyor"}, strings.Fields(args)...)
	main()
}

// runCLI runs conveyor with args (space-separated) in a child process with
// REDIS_URL set to url ("" unsets it) and returns its exit status and
// stderr.
func runCLI(t *testing.T, url, args string) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCLIHelperProcess$")
	cmd.Env = append(os.Environ(), cliHelperEnv+"="+args, "REDIS_URL="+url)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("conveyor %s: %v, want a failure; stderr:\n%s", args, err, stderr.String())
	}
	if stdout.Len() > 0 {
		t.Errorf("conveyor %s: stdout %q, want nothing", args, stdout.String())
	}
	return ee.ExitCode(), stderr.String()
}

// closedPort returns a loopback address nothing listens on, and its port.
func closedPort(t *testing.T) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	return addr, port
}

// TestConnectFailsInOneLine: a Redis that does not answer makes a command
// exit 1 with one line on stderr, naming the address and where the URL
// came from and saying how to start a server there; nothing from go-redis.
func TestConnectFailsInOneLine(t *testing.T) {
	t.Parallel()
	addr, port := closedPort(t)
	refused := regexp.QuoteMeta(" dial tcp "+addr+": connect: connection refused; start one with: redis-server --port "+port) + `\n$`
	for _, c := range []struct {
		env, args string
		want      string
	}{
		{"redis://:secret@" + addr + "/0", "queues", `^conveyor queues: cannot reach Redis at ` + regexp.QuoteMeta(addr) + ` \(REDIS_URL\):` + refused},
		{"", "stats q -redis redis://" + addr + "/3", `^conveyor stats: cannot reach Redis at ` + regexp.QuoteMeta(addr) + ` \(-redis\):` + refused},
	} {
		code, stderr := runCLI(t, c.env, c.args)
		if code != 1 || !regexp.MustCompile(c.want).MatchString(stderr) {
			t.Errorf("REDIS_URL=%s conveyor %s: exit %d, stderr\n%s\nwant exit 1 and one line matching %s", c.env, c.args, code, stderr, c.want)
		}
	}
}

// TestParseURLNamesItsSource: a URL that is not one is refused in one line
// naming where it came from, without its password.
func TestParseURLNamesItsSource(t *testing.T) {
	t.Parallel()
	const want = "want redis://host:port/db or rediss://host:port/db"
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "REDIS_URL" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		url, env, from string
	}{
		{"notaurl", "notaurl", "REDIS_URL"},
		{"notaurl", "", "-redis"},
		{"notaurl", "redis://elsewhere:6379/0", "-redis"},
		{defaultRedisURL, "", "default"},
		{defaultRedisURL, defaultRedisURL, "REDIS_URL"},
	} {
		tg := &target{redisURL: c.url}
		if got := tg.urlFrom(env(c.env)); got != c.from {
			t.Errorf("URL %q, REDIS_URL %q: from %q, want %q", c.url, c.env, got, c.from)
		}
	}
	_, err := (&target{redisURL: "notaurl"}).parseURL()
	if err == nil || !strings.HasSuffix(err.Error(), ` "notaurl" is not a Redis URL: `+want) {
		t.Errorf("parseURL(notaurl) = %v", err)
	}
	_, err = (&target{redisURL: "redis://u:secret@h:6379/x"}).parseURL()
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "invalid database number") {
		t.Errorf("parseURL of a bad URL with a password = %v, want the reason and no password", err)
	}
}
