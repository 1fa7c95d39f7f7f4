package middleware_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/broker/list"
	"github.com/conveyorq/conveyor/internal/proctest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// Crash tests re-execute this test binary as a child process and SIGKILL
// it (internal/proctest). A test file adds its entry points to children
// from an init func.
var procs = proctest.New("CONVEYOR_MIDDLEWARE_CHILD")

var children = procs.Funcs

// Every goroutine a middleware or a pool starts must be gone once the tests
// are over (Idempotency's lease keeper above all).
func TestMain(m *testing.M) { procs.Main(m) }

func startChild(t testing.TB, name string, env ...string) *proctest.Child {
	t.Helper()
	return procs.Start(t, name, env...)
}

var childClient = proctest.Client

// env is one test's Redis, key prefix, list driver and client (queue "q").
type env struct {
	rdb    redis.UniversalClient
	prefix string
	d      broker.Driver
	client *conveyor.Client
}

func newEnv(t *testing.T) env {
	t.Helper()
	e, err := envOn(redistest.Client(t), redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func envOn(rdb redis.UniversalClient, prefix string) (env, error) {
	d, err := list.New(rdb, &list.Config{Prefix: prefix})
	if err != nil {
		return env{}, err
	}
	c, err := conveyor.NewClient(d, &conveyor.ClientConfig{DefaultQueue: "q"})
	if err != nil {
		return env{}, err
	}
	return env{rdb: rdb, prefix: prefix, d: d, client: c}, nil
}

func waitFor(t *testing.T, what string, d time.Duration, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// fakeSettler records settle calls, for middleware tests that need no pool.
type fakeSettler struct {
	mu        sync.Mutex
	acks      int
	retries   []time.Time
	postpones []time.Time
	discards  []string
}

func (s *fakeSettler) Ack(context.Context, *broker.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acks++
	return nil
}

func (s *fakeSettler) Retry(_ context.Context, _ *broker.Delivery, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retries = append(s.retries, at)
	return nil
}

func (s *fakeSettler) Postpone(_ context.Context, _ *broker.Delivery, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.postpones = append(s.postpones, at)
	return nil
}

func (s *fakeSettler) Discard(_ context.Context, _ *broker.Delivery, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discards = append(s.discards, reason)
	return nil
}

func (s *fakeSettler) Extend(context.Context, *broker.Delivery, time.Duration) error { return nil }

// newJob returns a job of kind on queue "q" settled through s.
func newJob(s *fakeSettler, id, kind string, headers map[string]string) *conveyor.Job {
	d := &broker.Delivery{
		Message: broker.Message{ID: id, Kind: kind, Queue: "q", Payload: []byte("payload"), Headers: headers},
		Receipt: "r-" + id, Token: "1",
	}
	return conveyor.NewJob(d, s)
}

// goid returns the ID of the calling goroutine.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	b = b[:bytes.IndexByte(b, ' ')]
	n, _ := strconv.ParseUint(string(b), 10, 64)
	return n
}
