package retry_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/broker"
	"github.com/conveyorq/conveyor/retry"
)

// The ceiling of an Exponential policy's delay doubles from Base until it
// reaches Max; each delay is drawn uniformly below it (full jitter).
func ExampleExponential_Ceiling() {
	p := retry.Exponential{Base: 100 * time.Millisecond, Max: time.Second}
	for attempt := 1; attempt <= 6; attempt++ {
		fmt.Println(attempt, p.Ceiling(attempt))
	}
	// Output:
	// 1 100ms
	// 2 200ms
	// 3 400ms
	// 4 800ms
	// 5 1s
	// 6 1s
}

// A job's own MaxAttempts wins over its kind's; a policy named in its
// header wins over the kind's policy.
func ExampleRules_Decide() {
	rules := &retry.Rules{
		MaxAttempts: 10,
		Kinds:       map[string]retry.Override{"email": {MaxAttempts: 3, Policy: retry.Constant(time.Minute)}},
		Policies:    map[string]retry.Policy{"fast": retry.Constant(time.Second)},
	}
	fail := errors.New("smtp: 451 try again later")

	msg := &broker.Message{Kind: "email", Retries: 0}
	d := rules.Decide(msg, fail)
	fmt.Println(d.Action, d.Delay, d.Policy, d.MaxAttempts)

	msg.Headers = map[string]string{retry.Header: "fast"}
	d = rules.Decide(msg, fail)
	fmt.Println(d.Action, d.Delay, d.Policy, d.MaxAttempts)

	msg.Retries = 2 // the third run failed: the kind allows 3
	d = rules.Decide(msg, fail)
	fmt.Println(d.Action, d.Why, d.Reason)

	msg.MaxAttempts = 5 // the job's own cap
	d = rules.Decide(msg, fail)
	fmt.Println(d.Action, d.Delay, d.MaxAttempts)
	// Output:
	// retry 1m0s kind 3
	// retry 1s header:fast 3
	// discard max_attempts smtp: 451 try again later
	// retry 1s 5
}
