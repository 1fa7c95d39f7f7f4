// Package worker runs jobs: a Pool fetches jobs from one queue, runs each
// through the middleware chain and a handler (usually a Mux that routes by
// kind), and settles it.
//
//	mux := worker.NewMux()
//	worker.Handle(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
//		return send(ctx, r)
//	})
//	pool, err := worker.NewPool(driver, mux, &worker.Config{Queue: "mail", Concurrency: 20})
//	if err != nil {
//		return err
//	}
//	return pool.Run(ctx) // until ctx is cancelled; then drains and hands back
//
// What the pool does for you:
//   - fetches in batches, as many jobs as it has room for, and blocks in Redis
//     while the queue is empty (no polling);
//   - keeps up to Concurrency fetched jobs waiting so that fetch round trips
//     overlap running jobs, and acks finished jobs in shared round trips;
//   - extends the leases of running jobs every HeartbeatInterval, and cancels
//     a handler whose lease is lost (context cause broker.ErrLeaseLost);
//   - settles what the handler left unsettled: nil → ack; error → retry with
//     backoff (conveyor.RetryAfter overrides), or discard after MaxAttempts
//     or for conveyor.SkipRetry; a panic is an error with its stack;
//   - shuts down gracefully: stop fetching, let running jobs finish for
//     ShutdownGrace, then cancel them (cause ErrShutdown) and hand their jobs
//     back to the queue at once.
package worker
