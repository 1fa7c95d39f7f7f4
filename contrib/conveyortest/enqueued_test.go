package conveyortest_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/contrib/conveyortest"
)

func TestEnqueuedListsReadyThenDelayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "order.timeout", Receipt{OrderID: "o-2"}, &conveyor.EnqueueOptions{Delay: 30 * time.Minute, ID: "order:o-2:timeout"})
	e.enqueue(t, "email.receipt", Receipt{OrderID: "o-1"}, &conveyor.EnqueueOptions{MaxAttempts: 3, Headers: map[string]string{"trace": "t1"}})

	jobs := conveyortest.Enqueued[Receipt](t, e.d, "default")
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(jobs))
	}
	ready, timer := jobs[0], jobs[1]
	if ready.Kind != "email.receipt" || ready.Args.OrderID != "o-1" || ready.Delayed || !ready.RunAt.IsZero() ||
		ready.MaxAttempts != 3 || ready.Headers["trace"] != "t1" {
		t.Errorf("ready job: %+v", ready)
	}
	if want := conveyortest.DefaultStart.Add(30 * time.Minute); timer.ID != "order:o-2:timeout" || !timer.Delayed || !timer.RunAt.Equal(want) || timer.Args.OrderID != "o-2" {
		t.Errorf("delayed job: ID %q, delayed %v, run at %v, args %+v; want order:o-2:timeout due %v", timer.ID, timer.Delayed, timer.RunAt, timer.Args, want)
	}

	raw := conveyortest.Enqueued[json.RawMessage](t, e.d, "default")
	if string(raw[0].Args) != `{"order_id":"o-1"}` {
		t.Errorf("raw payload %s", raw[0].Args)
	}
	if n := len(conveyortest.Enqueued[Receipt](t, e.d, "other")); n != 0 {
		t.Errorf("an unused queue lists %d jobs", n)
	}
}

func TestRequireEnqueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(t, "email.receipt", Receipt{OrderID: "o-1"}, nil)
	e.enqueue(t, "sms", "not a receipt", nil)
	e.enqueue(t, "sms", "again", nil)
	if got := conveyortest.RequireEnqueued[Receipt](t, e.d, "default", "email.receipt"); got.Args.OrderID != "o-1" {
		t.Fatalf("RequireEnqueued returned %+v", got.Args)
	}
	for _, tc := range []struct{ kind, want string }{
		{"missing", `0 jobs of kind "missing"`},
		{"sms", `2 jobs of kind "sms"`},
	} {
		msg, failed := runTB(func(tb testing.TB) { conveyortest.RequireEnqueued[string](tb, e.d, "default", tc.kind) })
		if !failed || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "email.receipt") {
			t.Errorf("RequireEnqueued of %q: failed %v with %q, want a failure saying %q and what the queue holds", tc.kind, failed, msg, tc.want)
		}
	}
	msg, failed := runTB(func(tb testing.TB) { conveyortest.Enqueued[Receipt](tb, e.d, "default") })
	if !failed || !strings.Contains(msg, "does not decode") {
		t.Errorf("Enqueued of mixed payloads into one type: failed %v with %q, want a decode failure", failed, msg)
	}
}

// fakeTB records a helper's failure; Fatalf ends the helper's goroutine
// as testing.T's does.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	msg    string
	failed bool
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg, f.failed = fmt.Sprintf(format, args...), true
	f.mu.Unlock()
	runtime.Goexit()
}

// runTB runs f with a fakeTB and reports how it failed.
func runTB(f func(testing.TB)) (string, bool) {
	tb := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.msg, tb.failed
}

// Leases run out by the fake clock: a blocked Fetch receives an expired
// delivery when the test advances past its deadline, and the stale
// holder's ack is refused.
