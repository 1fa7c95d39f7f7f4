package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/drivertest"
	"github.com/conveyorq/conveyor/internal/inspecttest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// cliEnv is a test's own key prefix on the test Redis, with a driver of
// one kind on it to put jobs in place, and the CLI pointed at it.
type cliEnv struct {
	t      *testing.T
	ctx    context.Context
	url    string
	prefix string
	rdb    redis.UniversalClient
	driver string
	d      broker.Driver
	client *conveyor.Client
	*inspecttest.Seeder
}

// cliRedisURL is the URL of the test Redis (CONVEYOR_TEST_REDIS_URL, or
// redistest's default), checked to answer: a test fails, saying how to
// start one, when it does not.
func cliRedisURL(t *testing.T) string {
	t.Helper()
	redistest.Client(t)
	if u := os.Getenv("CONVEYOR_TEST_REDIS_URL"); u != "" {
		return u
	}
	return redistest.DefaultURL
}

func newCLIEnv(t *testing.T, driver string) *cliEnv {
	t.Helper()
	dt, ok := drivertest.Named(driver)
	if !ok {
		t.Fatalf("no driver %q", driver)
	}
	url := cliRedisURL(t)
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d := dt.Must(t, rdb, prefix)
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "work"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &cliEnv{t: t, ctx: ctx, url: url, prefix: prefix, rdb: rdb, driver: driver, d: d, client: c,
		Seeder: &inspecttest.Seeder{T: t, Ctx: ctx, Client: c, Driver: d}}
}

// result is one run of the CLI.
type result struct {
	code        int
	out, errOut string
}

// runIn runs conveyor with args against the env's Redis and prefix, with
// stdin reading in (not a terminal).
func (e *cliEnv) runIn(in string, args ...string) result {
	e.t.Helper()
	var stdout, stderr bytes.Buffer
	all := append(append([]string{}, args...), "-redis", e.url, "-prefix", e.prefix)
	code := run(e.ctx, all, stdio{in: strings.NewReader(in), out: &stdout, err: &stderr})
	return result{code: code, out: stdout.String(), errOut: stderr.String()}
}

// run runs conveyor with args and an empty stdin.
func (e *cliEnv) run(args ...string) result {
	e.t.Helper()
	return e.runIn("", args...)
}

// ok runs conveyor with args and fails the test unless it exits 0.
func (e *cliEnv) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("conveyor %q: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.out, r.errOut)
	}
	return r
}

// json runs conveyor with args and -json and decodes its output into v,
// which must hold exactly the fields printed.
func (e *cliEnv) json(v any, args ...string) {
	e.t.Helper()
	r := e.ok(append(args, "-json")...)
	reflect.ValueOf(v).Elem().SetZero() // no field left from an earlier decode
	dec := json.NewDecoder(strings.NewReader(r.out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		e.t.Fatalf("conveyor %q -json: %v\n%s", args, err, r.out)
	}
}

// fails runs conveyor with args and checks its exit status and that
// stderr says want.
func (e *cliEnv) fails(code int, want string, args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != code {
		e.t.Errorf("conveyor %q: exit %d, want %d\nstdout: %s\nstderr: %s", args, r.code, code, r.out, r.errOut)
	}
	if !strings.Contains(r.errOut, want) {
		e.t.Errorf("conveyor %q: stderr %q lacks %q", args, r.errOut, want)
	}
	return r
}

// sizes reads queue's figures straight from the Inspector.
func (e *cliEnv) sizes(queue string) *conveyor.QueueSizes {
	e.t.Helper()
	insp, err := conveyor.NewInspector(e.d, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := insp.Queue(e.ctx, queue)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// eachDriver runs test on the list and the stream driver, in parallel.
func eachDriver(t *testing.T, test func(t *testing.T, e *cliEnv)) {
	t.Parallel()
	for _, dt := range drivertest.Durable {
		t.Run(dt.Name, func(t *testing.T) {
			t.Parallel()
			test(t, newCLIEnv(t, dt.Name))
		})
	}
}

// fields returns the line of out that starts with first, split on white
// space, or nil.
func fields(out, first string) []string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

// wantFields checks the line of out starting with want[0].
func wantFields(t *testing.T, out string, want ...string) {
	t.Helper()
	got := fields(out, want[0])
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("line %q = %q, want %q\nin:\n%s", want[0], got, want, out)
	}
}
