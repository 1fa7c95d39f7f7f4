// Package retry decides what happens to a job whose handler failed: run it
// again later, or give up and move it to its queue's discard queue.
//
// A Policy says how long to wait (Exponential with full jitter and a cap,
// Constant, or a Func); Rules hold the default policy and attempt cap, with
// overrides per kind and per job. A retry goes through the queue's delay
// timers (Job.Retry), so the worker slot is free at once and nothing sleeps
// in process.
//
//	rules := &retry.Rules{
//		Policy:      retry.Exponential{Base: time.Second, Max: 10 * time.Minute},
//		MaxAttempts: 10,
//		Kinds:       map[string]retry.Override{"webhook": {MaxAttempts: 50}},
//		Policies:    map[string]retry.Policy{"fast": retry.Constant(100 * time.Millisecond)},
//	}
//	pool, err := worker.NewPool(driver, mux, &worker.Config{Queue: "mail", Retry: rules})
//
// A job picks a named policy with the Header header; its own MaxAttempts
// (conveyor.EnqueueOptions.MaxAttempts) wins over the kind's and the
// default. docs/retry.md tells the whole story.
package retry
