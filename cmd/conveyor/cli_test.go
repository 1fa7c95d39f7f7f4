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
	return &cliEnv{t: t, ctx: ctx, url: url, prefix: prefix, rdb: rdb, driver: driver, d: d, client: c}
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

// enqueue stores a job of kind with id in queue.
func (e *cliEnv) enqueue(queue, kind, id string, opts *conveyor.EnqueueOptions) {
	e.t.Helper()
	var o conveyor.EnqueueOptions
	if opts != nil {
		o = *opts
	}
	o.Queue, o.ID = queue, id
	if _, err := e.client.Enqueue(e.ctx, kind, map[string]string{"id": id}, &o); err != nil {
		e.t.Fatalf("enqueue %s: %v", id, err)
	}
}

// fetch leases n jobs of queue to a consumer that never settles them
// (its leases last 10 minutes) and returns them.
func (e *cliEnv) fetch(queue string, n int) (broker.Consumer, []*broker.Delivery) {
	e.t.Helper()
	c, err := e.d.Open(e.ctx, queue, &broker.ConsumerOptions{VisibilityTimeout: 10 * time.Minute})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close(context.Background()) })
	var ds []*broker.Delivery
	for len(ds) < n {
		got, err := c.Fetch(e.ctx, n-len(ds))
		if err != nil {
			e.t.Fatalf("fetch: %v", err)
		}
		ds = append(ds, got...)
	}
	return c, ds
}

// seed puts jobs of queue "work" in every state: discarded d1 (kind
// mail, reason "boom 1") and d2 (sms, "boom 2"), in flight f1 and f2,
// ready r1 (mail), r2 (sms), r3 (mail), delayed t1 and t2 (due in 1h and
// 2h), in that order.
func (e *cliEnv) seed() {
	e.t.Helper()
	e.enqueue("work", "mail", "d1", nil)
	e.enqueue("work", "sms", "d2", nil)
	c, ds := e.fetch("work", 2)
	for _, d := range ds {
		if err := c.Discard(e.ctx, d, "boom "+strings.TrimPrefix(d.ID, "d")); err != nil {
			e.t.Fatal(err)
		}
	}
	e.enqueue("work", "mail", "f1", nil)
	e.enqueue("work", "mail", "f2", nil)
	e.fetch("work", 2)
	e.enqueue("work", "mail", "r1", nil)
	e.enqueue("work", "sms", "r2", nil)
	e.enqueue("work", "mail", "r3", nil)
	e.enqueue("work", "mail", "t1", &conveyor.EnqueueOptions{Delay: time.Hour})
	e.enqueue("work", "mail", "t2", &conveyor.EnqueueOptions{Delay: 2 * time.Hour})
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
