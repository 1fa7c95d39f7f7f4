package retry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/retry"
)

// TestDecidePrecedence: max attempts come from the job, then its kind, then
// the rules, then the default; the delay from RetryAfter, then the policy
// the job's header names, then the kind's, then the default.
func TestDecidePrecedence(t *testing.T) {
	t.Parallel()
	rules := &retry.Rules{
		Policy:      retry.Constant(time.Second),
		MaxAttempts: 6,
		Kinds: map[string]retry.Override{
			"mail":   {Policy: retry.Constant(2 * time.Second), MaxAttempts: 4},
			"report": {MaxAttempts: 9},                      // keeps the default policy
			"ping":   {Policy: retry.Constant(time.Minute)}, // keeps the default cap
		},
		Policies: map[string]retry.Policy{"fast": retry.Constant(5 * time.Millisecond)},
	}
	fail := errors.New("downstream 503")
	for _, c := range []struct {
		name        string
		msg         broker.Message
		err         error
		action      retry.Action
		delay       time.Duration
		maxAttempts int
		why, policy string
	}{
		{"default", broker.Message{Kind: "other"}, fail, retry.Retry, time.Second, 6, "policy", "default"},
		{"kind", broker.Message{Kind: "mail"}, fail, retry.Retry, 2 * time.Second, 4, "policy", "kind"},
		{"kind cap only", broker.Message{Kind: "report"}, fail, retry.Retry, time.Second, 9, "policy", "default"},
		{"kind policy only", broker.Message{Kind: "ping"}, fail, retry.Retry, time.Minute, 6, "policy", "kind"},
		{"job cap beats kind", broker.Message{Kind: "mail", MaxAttempts: 10, Retries: 5}, fail, retry.Retry, 2 * time.Second, 10, "policy", "kind"},
		{"job cap beats default", broker.Message{Kind: "other", MaxAttempts: 2, Retries: 1}, fail, retry.Discard, 0, 2, "max_attempts", ""},
		{"header beats kind", broker.Message{Kind: "mail", Headers: map[string]string{retry.Header: "fast"}}, fail, retry.Retry, 5 * time.Millisecond, 4, "policy", "header:fast"},
		{"unknown header falls back", broker.Message{Kind: "mail", Headers: map[string]string{retry.Header: "nope"}}, fail, retry.Retry, 2 * time.Second, 4, "policy", "kind"},
		{"retry after beats header", broker.Message{Kind: "mail", Headers: map[string]string{retry.Header: "fast"}}, conveyor.RetryAfter(42*time.Second, fail), retry.Retry, 42 * time.Second, 4, "retry_after", ""},
		{"retry after counts an attempt", broker.Message{Kind: "mail", Retries: 3}, conveyor.RetryAfter(time.Second, fail), retry.Discard, 0, 4, "max_attempts", ""},
		{"last attempt", broker.Message{Kind: "mail", Retries: 3}, fail, retry.Discard, 0, 4, "max_attempts", ""},
		{"one before last", broker.Message{Kind: "mail", Retries: 2}, fail, retry.Retry, 2 * time.Second, 4, "policy", "kind"},
		{"skip retry", broker.Message{Kind: "mail"}, fmt.Errorf("wrapped: %w", conveyor.SkipRetry(fail)), retry.Discard, 0, 4, "skip_retry", ""},
	} {
		dec := rules.Decide(&c.msg, c.err)
		if dec.Action != c.action || dec.Delay != c.delay || dec.MaxAttempts != c.maxAttempts || dec.Why != c.why || dec.Policy != c.policy || dec.Attempt != c.msg.Retries+1 {
			t.Errorf("%s: Decide = %+v, want %v after %v (cap %d, why %s, policy %q, attempt %d)",
				c.name, dec, c.action, c.delay, c.maxAttempts, c.why, c.policy, c.msg.Retries+1)
		}
		if c.action == retry.Discard && dec.Reason != c.err.Error() {
			t.Errorf("%s: discard reason %q, want the error %q", c.name, dec.Reason, c.err.Error())
		}
	}
}

func TestDecideZeroRules(t *testing.T) {
	t.Parallel()
	for _, r := range []*retry.Rules{nil, {}} {
		dec := r.Decide(&broker.Message{Kind: "k"}, errors.New("x"))
		if dec.Action != retry.Retry || dec.MaxAttempts != retry.DefaultMaxAttempts || dec.Delay < 0 || dec.Delay > time.Second || dec.Policy != "default" {
			t.Errorf("zero rules: first failure = %+v, want a retry within [0, 1s], cap %d", dec, retry.DefaultMaxAttempts)
		}
		dec = r.Decide(&broker.Message{Kind: "k", Retries: retry.DefaultMaxAttempts - 1}, errors.New("x"))
		if dec.Action != retry.Discard {
			t.Errorf("zero rules: failure of run %d = %+v, want a discard", retry.DefaultMaxAttempts, dec)
		}
	}
}

// TestDecideClampsDelays: a policy's negative delay means at once, a huge
// one is capped at MaxDelay.
func TestDecideClampsDelays(t *testing.T) {
	t.Parallel()
	for give, want := range map[time.Duration]time.Duration{-time.Hour: 0, 1<<63 - 1: retry.MaxDelay, time.Second: time.Second} {
		r := &retry.Rules{Policy: retry.Func(func(int, error) time.Duration { return give })}
		if dec := r.Decide(&broker.Message{Kind: "k"}, errors.New("x")); dec.Delay != want {
			t.Errorf("policy delay %v: decided %v, want %v", give, dec.Delay, want)
		}
	}
	// The policy sees the run number from 1 and the handler's error.
	var gotAttempt int
	var gotErr error
	fail := errors.New("y")
	r := &retry.Rules{Policy: retry.Func(func(a int, err error) time.Duration { gotAttempt, gotErr = a, err; return 0 })}
	r.Decide(&broker.Message{Kind: "k", Retries: 4}, fail)
	if gotAttempt != 5 || gotErr != fail {
		t.Errorf("policy called with (%d, %v), want (5, %v)", gotAttempt, gotErr, fail)
	}
}

func TestDiscardReasonCut(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 600) // 1200 bytes, two per rune
	dec := (&retry.Rules{MaxAttempts: 1}).Decide(&broker.Message{Kind: "k"}, errors.New("a"+long))
	if len(dec.Reason) > 1024 || len(dec.Reason) < 1020 || !utf8.ValidString(dec.Reason) || !strings.HasPrefix(dec.Reason, "aé") {
		t.Fatalf("reason of %d bytes (valid UTF-8: %v), want the error cut to at most 1024 bytes on a rune boundary", len(dec.Reason), utf8.ValidString(dec.Reason))
	}
	dec = (&retry.Rules{MaxAttempts: 1}).Decide(&broker.Message{Kind: "k"}, errors.New(""))
	if dec.Reason == "" {
		t.Fatal("an empty error gave an empty reason")
	}
}

// fakeSettler records settle calls instead of talking to Redis.
type fakeSettler struct {
	mu      sync.Mutex
	calls   []string
	retryAt time.Time
	reason  string
	err     error // returned by Retry and Discard
}

func (f *fakeSettler) record(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
	return f.err
}

func (f *fakeSettler) Ack(context.Context, *broker.Delivery) error { return f.record("ack") }
func (f *fakeSettler) Retry(_ context.Context, _ *broker.Delivery, at time.Time) error {
	f.retryAt = at
	return f.record("retry")
}

func (f *fakeSettler) Postpone(context.Context, *broker.Delivery, time.Time) error {
	return f.record("postpone")
}

func (f *fakeSettler) Discard(_ context.Context, _ *broker.Delivery, reason string) error {
	f.reason = reason
	return f.record("discard")
}

func (f *fakeSettler) Extend(context.Context, *broker.Delivery, time.Duration) error {
	return f.record("extend")
}

func (f *fakeSettler) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, ",")
}

func newJob(m broker.Message, s conveyor.Settler) *conveyor.Job {
	return conveyor.NewJob(&broker.Delivery{Message: m, Receipt: "r", Token: "1"}, s)
}

// TestSettleUsesJobRetry: Settle hands the job back through Job.Retry at
// now+delay (the timers, not a sleep), or discards it with the reason.
func TestSettleUsesJobRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &retry.Rules{Policy: retry.Constant(90 * time.Second), MaxAttempts: 2, Now: func() time.Time { return now }}
	ctx := context.Background()

	s := &fakeSettler{}
	job := newJob(broker.Message{ID: "a", Kind: "k"}, s)
	dec, err := r.Settle(ctx, job, errors.New("first"))
	if err != nil || dec.Action != retry.Retry || s.String() != "retry" || !s.retryAt.Equal(now.Add(90*time.Second)) || !job.Settled() {
		t.Fatalf("Settle = %+v, %v; calls %q at %v; want one retry at now+90s", dec, err, s, s.retryAt)
	}

	s = &fakeSettler{}
	job = newJob(broker.Message{ID: "a", Kind: "k", Retries: 1}, s)
	dec, err = r.Settle(ctx, job, errors.New("second"))
	if err != nil || dec.Action != retry.Discard || s.String() != "discard" || s.reason != "second" {
		t.Fatalf("Settle = %+v, %v; calls %q reason %q; want a discard with reason %q", dec, err, s, s.reason, "second")
	}

	// A settle that fails leaves the job unsettled for the pool to try again.
	s = &fakeSettler{err: errors.New("redis down")}
	job = newJob(broker.Message{ID: "a", Kind: "k"}, s)
	if _, err := r.Settle(ctx, job, errors.New("x")); err == nil || job.Settled() {
		t.Fatalf("Settle with Redis down = %v, settled %v; want the error and an unsettled job", err, job.Settled())
	}
}

// TestMiddlewareSettles covers what the middleware settles and what it
// leaves to the pool.
func TestMiddlewareSettles(t *testing.T) {
	t.Parallel()
	mw, err := retry.Middleware(&retry.Rules{Policy: retry.Constant(time.Minute), MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("boom")
	leaseLost, cancelLease := context.WithCancelCause(context.Background())
	cancelLease(broker.ErrLeaseLost)
	shutdown, cancelShutdown := context.WithCancelCause(context.Background())
	cancelShutdown(errors.New("conveyor: pool shutting down"))
	timedOut, cancelTimeout := context.WithTimeout(context.Background(), 0)
	defer cancelTimeout()
	<-timedOut.Done()

	for _, c := range []struct {
		name    string
		ctx     context.Context
		attempt int
		h       func(context.Context, *conveyor.Job) error
		calls   string
	}{
		{"success is left to the pool's ack", context.Background(), 0, func(context.Context, *conveyor.Job) error { return nil }, ""},
		{"failure retried", context.Background(), 0, func(context.Context, *conveyor.Job) error { return fail }, "retry"},
		{"last failure discarded", context.Background(), 2, func(context.Context, *conveyor.Job) error { return fail }, "discard"},
		{"skip retry discarded", context.Background(), 0, func(context.Context, *conveyor.Job) error { return conveyor.SkipRetry(fail) }, "discard"},
		{"settled by the handler", context.Background(), 0, func(ctx context.Context, j *conveyor.Job) error {
			_ = j.Ack(ctx)
			return fail
		}, "ack"},
		{"timeout is a failure", timedOut, 0, func(ctx context.Context, _ *conveyor.Job) error { return ctx.Err() }, "retry"},
		{"lease lost left alone", leaseLost, 0, func(ctx context.Context, _ *conveyor.Job) error { return ctx.Err() }, ""},
		{"shutdown left alone", shutdown, 0, func(ctx context.Context, _ *conveyor.Job) error { return ctx.Err() }, ""},
	} {
		s := &fakeSettler{}
		job := newJob(broker.Message{ID: "a", Kind: "k", Retries: c.attempt}, s)
		got := mw(conveyor.HandlerFunc(c.h)).ProcessJob(c.ctx, job)
		want := c.h(c.ctx, newJob(broker.Message{}, &fakeSettler{}))
		if s.String() != c.calls {
			t.Errorf("%s: settle calls %q, want %q", c.name, s, c.calls)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: middleware returned %v, want the handler's %v", c.name, got, want)
		}
	}
}

// TestMiddlewarePanicPassesThrough: a panic is not turned into a settle by
// the middleware; it reaches the pool (or a recovering middleware outside).
func TestMiddlewarePanicPassesThrough(t *testing.T) {
	t.Parallel()
	mw, err := retry.Middleware(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeSettler{}
	job := newJob(broker.Message{ID: "a", Kind: "k"}, s)
	got := func() (r any) {
		defer func() { r = recover() }()
		_ = mw(conveyor.HandlerFunc(func(context.Context, *conveyor.Job) error { panic("boom") })).ProcessJob(context.Background(), job)
		return nil
	}()
	if got != "boom" || s.String() != "" {
		t.Fatalf("recovered %v, settle calls %q; want the panic to pass through unsettled", got, s)
	}
}
