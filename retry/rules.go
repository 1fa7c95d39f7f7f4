package retry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/conveyorq/conveyor"
	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/internal/timers"
)

// Header names the job header that selects a per-job policy: its value is a
// key of Rules.Policies. A job enqueued with
//
//	&conveyor.EnqueueOptions{Headers: map[string]string{retry.Header: "slow"}}
//
// retries with Rules.Policies["slow"]. An unknown name falls back to the
// kind's policy and then the default, so a producer that is ahead of the
// workers' configuration cannot break a job.
const Header = "conveyor-retry"

// DefaultMaxAttempts caps handler runs when neither the job, its kind nor
// Rules.MaxAttempts says otherwise.
const DefaultMaxAttempts = 25

// MaxDelay caps every delay, whatever the policy returns, at the furthest a
// timer may be scheduled (100 years), so that a policy cannot overflow the
// retry time.
const MaxDelay = timers.MaxAhead

// maxReason caps the discard reason taken from an error, in bytes.
const maxReason = 1024

// Rules decide what happens to a job whose handler failed: retry it later,
// through the queue's delay timers, or discard it. worker.Config.Retry takes
// a *Rules; Middleware applies one inside a handler chain.
//
// The zero value is valid: Exponential{} (1s doubling to 1h, full jitter)
// and DefaultMaxAttempts. Rules are read, never changed, by their users;
// do not change them while a pool uses them.
//
// Precedence, most specific first:
//   - max attempts: the job's own (Message.MaxAttempts, set with
//     EnqueueOptions.MaxAttempts), then Kinds[kind].MaxAttempts, then
//     MaxAttempts, then DefaultMaxAttempts;
//   - delay: conveyor.RetryAfter in the handler's error, then the policy the
//     job's Header names in Policies, then Kinds[kind].Policy, then Policy,
//     then Exponential{}.
type Rules struct {
	// Policy is the default policy. Defaults to Exponential{}.
	Policy Policy
	// MaxAttempts caps handler runs of a job: a failure of run number
	// MaxAttempts discards the job. Defaults to DefaultMaxAttempts.
	MaxAttempts int
	// Kinds overrides Policy and MaxAttempts for the jobs of a kind.
	Kinds map[string]Override
	// Policies are the policies a job may name in its Header.
	Policies map[string]Policy
	// Now is the clock a retry time is computed from. Defaults to time.Now.
	Now func() time.Time
}

// Override replaces Rules' defaults for one kind. Zero fields keep them.
type Override struct {
	Policy      Policy
	MaxAttempts int
}

// Validate reports a configuration the rules cannot apply: a negative
// attempt cap, a policy whose own settings are wrong, an empty name.
func (r *Rules) Validate() error {
	if r == nil {
		return nil
	}
	var errs []error
	check := func(where string, p Policy, maxAttempts int) {
		if maxAttempts < 0 {
			errs = append(errs, fmt.Errorf("retry: %s: negative MaxAttempts %d", where, maxAttempts))
		}
		if v, ok := p.(validator); ok {
			if err := v.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
		}
	}
	check("Rules", r.Policy, r.MaxAttempts)
	for kind, o := range r.Kinds {
		if kind == "" {
			errs = append(errs, errors.New("retry: Kinds: empty kind"))
		}
		check(fmt.Sprintf("Kinds[%q]", kind), o.Policy, o.MaxAttempts)
	}
	for name, p := range r.Policies {
		if name == "" {
			errs = append(errs, errors.New("retry: Policies: empty name"))
		}
		if p == nil {
			errs = append(errs, fmt.Errorf("retry: Policies[%q]: nil policy", name))
			continue
		}
		check(fmt.Sprintf("Policies[%q]", name), p, 0)
	}
	return errors.Join(errs...)
}

// Action is what a Decision does with a failed job.
type Action int

const (
	// Retry hands the job back to run again after Decision.Delay, counting
	// the failed run as an attempt.
	Retry Action = iota + 1
	// Discard moves the job to its queue's discard queue with
	// Decision.Reason.
	Discard
)

func (a Action) String() string {
	switch a {
	case Retry:
		return "retry"
	case Discard:
		return "discard"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is what the rules make of one failed run.
type Decision struct {
	Action Action
	// Delay is how long the job waits before its next run (Retry).
	Delay time.Duration
	// Reason is the discard reason (Discard): the text of the handler's
	// error, cut to 1 KiB.
	Reason string
	// Attempt is the number of the run that failed, from 1. Crash
	// recoveries and postponements are not runs that failed.
	Attempt int
	// MaxAttempts is the cap that applied.
	MaxAttempts int
	// Why names the rule that decided: "skip_retry", "max_attempts",
	// "retry_after", or "policy".
	Why string
	// Policy names the policy that chose Delay when Why is "policy":
	// "header:<name>", "kind" or "default".
	Policy string
}

// Decide applies the rules to msg, whose handler run just failed with err
// (non-nil). It changes nothing; Settle carries the decision out.
//
// In order: an error marked conveyor.SkipRetry is discarded at once; a run
// that used up the attempts is discarded, its error the reason; an error
// made with conveyor.RetryAfter retries after the delay it names; any other
// error retries after the policy's delay.
func (r *Rules) Decide(msg *broker.Message, err error) Decision {
	if r == nil {
		r = &Rules{}
	}
	if err == nil {
		err = errors.New("conveyor: retry: failure without an error")
	}
	kind := r.Kinds[msg.Kind]
	dec := Decision{
		Attempt:     msg.Retries + 1,
		MaxAttempts: cmp.Or(msg.MaxAttempts, kind.MaxAttempts, r.MaxAttempts, DefaultMaxAttempts),
	}
	switch {
	case conveyor.IsSkipRetry(err):
		dec.Action, dec.Why, dec.Reason = Discard, "skip_retry", reason(err)
		return dec
	case dec.Attempt >= dec.MaxAttempts:
		dec.Action, dec.Why, dec.Reason = Discard, "max_attempts", reason(err)
		return dec
	}
	dec.Action = Retry
	if d, ok := conveyor.RetryAfterOf(err); ok {
		dec.Why, dec.Delay = "retry_after", d
	} else {
		p, name := r.policy(msg, kind)
		dec.Why, dec.Policy, dec.Delay = "policy", name, p.Delay(dec.Attempt, err)
	}
	dec.Delay = min(max(dec.Delay, 0), MaxDelay)
	return dec
}

// policy picks the policy for msg: the one its header names, its kind's, or
// the default.
func (r *Rules) policy(msg *broker.Message, kind Override) (Policy, string) {
	if name, ok := msg.Headers[Header]; ok {
		if p := r.Policies[name]; p != nil {
			return p, "header:" + name
		}
	}
	if kind.Policy != nil {
		return kind.Policy, "kind"
	}
	if r.Policy != nil {
		return r.Policy, "default"
	}
	return Exponential{}, "default"
}

// Settle decides what to do with job, whose handler failed with err, and
// does it: job.Retry(now+delay), which reschedules the job through its
// queue's delay timers so the worker slot is free at once, or
// job.Discard(reason). It returns the decision and the settle call's error;
// on an error other than conveyor.ErrLeaseLost the job stays unsettled and
// may be settled again.
func (r *Rules) Settle(ctx context.Context, job *conveyor.Job, err error) (Decision, error) {
	dec := r.Decide(&job.Message, err)
	var serr error
	switch dec.Action {
	case Discard:
		serr = job.Discard(ctx, dec.Reason)
	default:
		serr = job.Retry(ctx, r.now().Add(dec.Delay))
	}
	return dec, serr
}

func (r *Rules) now() time.Time {
	if r != nil && r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// reason is err's text cut to maxReason bytes on a rune boundary.
func reason(err error) string {
	s := err.Error()
	if s == "" {
		return "conveyor: handler failed with an empty error"
	}
	if len(s) <= maxReason {
		return s
	}
	i := maxReason
	for i > 0 && !utf8.RuneStart(s[i]) { // do not split a rune
		i--
	}
	return s[:i]
}
