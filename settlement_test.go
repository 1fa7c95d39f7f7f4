package conveyor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
)

// fakeSettler settles nothing; err is what every call returns.
type fakeSettler struct{ err error }

func (f fakeSettler) Ack(context.Context, *broker.Delivery) error                   { return f.err }
func (f fakeSettler) Retry(context.Context, *broker.Delivery, time.Time) error      { return f.err }
func (f fakeSettler) Postpone(context.Context, *broker.Delivery, time.Time) error   { return f.err }
func (f fakeSettler) Discard(context.Context, *broker.Delivery, string) error       { return f.err }
func (f fakeSettler) Extend(context.Context, *broker.Delivery, time.Duration) error { return f.err }

func TestJobRecordsItsSettlement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Now().Add(time.Minute)
	for _, c := range []struct {
		name   string
		err    error
		settle func(*conveyor.Job) error
		want   conveyor.Settlement
	}{
		{"ack", nil, func(j *conveyor.Job) error { return j.Ack(ctx) }, conveyor.Settlement{Outcome: conveyor.OutcomeAcked}},
		{"retry", nil, func(j *conveyor.Job) error { return j.Retry(ctx, at) }, conveyor.Settlement{Outcome: conveyor.OutcomeRetried, At: at}},
		{"postpone", nil, func(j *conveyor.Job) error { return j.Postpone(ctx, at) }, conveyor.Settlement{Outcome: conveyor.OutcomePostponed, At: at}},
		{"discard", nil, func(j *conveyor.Job) error { return j.Discard(ctx, "why") }, conveyor.Settlement{Outcome: conveyor.OutcomeDiscarded, Reason: "why"}},
		{"lost", conveyor.ErrLeaseLost, func(j *conveyor.Job) error { return j.Ack(ctx) }, conveyor.Settlement{Outcome: conveyor.OutcomeLeaseLost, Err: conveyor.ErrLeaseLost}},
		{"failed", errors.New("redis away"), func(j *conveyor.Job) error { return j.Ack(ctx) }, conveyor.Settlement{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := conveyor.NewJob(&broker.Delivery{}, fakeSettler{c.err})
			_ = c.settle(j)
			got := j.Settlement()
			if got.Outcome != c.want.Outcome || !got.At.Equal(c.want.At) || got.Reason != c.want.Reason || !errors.Is(got.Err, c.want.Err) {
				t.Fatalf("Settlement() = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestFinishJobCallsObserversOnce(t *testing.T) {
	t.Parallel()
	j := conveyor.NewJob(&broker.Delivery{}, fakeSettler{})
	var calls []string
	j.OnFinish(func(s conveyor.Settlement) { calls = append(calls, "a:"+s.Outcome.String()) })
	j.OnFinish(func(s conveyor.Settlement) { calls = append(calls, "b:"+s.Outcome.String()) })
	conveyor.FinishJob(j, conveyor.Settlement{Outcome: conveyor.OutcomeReleased})
	conveyor.FinishJob(j, conveyor.Settlement{Outcome: conveyor.OutcomeAcked})
	j.OnFinish(func(s conveyor.Settlement) { calls = append(calls, "late:"+s.Outcome.String()) })
	want := "[a:released b:released late:released]"
	if got := fmt.Sprint(calls); got != want {
		t.Fatalf("observer calls %s, want %s", got, want)
	}
	if o := conveyor.Outcome(99).String(); o != "unknown" {
		t.Errorf("Outcome(99) = %q", o)
	}
}

// TestNilSettler: a Job made with NewJob(d, nil), as a handler's unit test
// makes one, fails its settle calls with an error instead of panicking, and
// stays unsettled.
func TestNilSettler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := conveyor.NewJob(&broker.Delivery{Message: broker.Message{ID: "1", Kind: "k"}}, nil)
	for name, call := range map[string]func() error{
		"ack":      func() error { return j.Ack(ctx) },
		"retry":    func() error { return j.Retry(ctx, time.Now()) },
		"postpone": func() error { return j.Postpone(ctx, time.Now()) },
		"discard":  func() error { return j.Discard(ctx, "why") },
		"extend":   func() error { return j.Extend(ctx, time.Minute) },
	} {
		if err := call(); err == nil {
			t.Errorf("%s on a job without a settler returned nil", name)
		}
	}
	if j.Settled() {
		t.Error("a job whose settles failed reports itself settled")
	}
}
