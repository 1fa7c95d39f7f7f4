// Package middleware holds the middleware Conveyor ships for job handlers:
// Recover, Logging, Timeout, RateLimit and Idempotency. Each is a
// conveyor.Middleware (func(conveyor.Handler) conveyor.Handler), so they
// compose with conveyor.Chain and worker.Config.Middleware.
//
// The suggested order, outermost first:
//
//	limit, err := middleware.RateLimit(rdb, &middleware.RateLimitConfig{
//		Limit: 100, Period: time.Second, Key: middleware.FromHeader("tenant"),
//	})
//	if err != nil {
//		return err
//	}
//	once, err := middleware.Idempotency(rdb, nil) // key from the "idempotency-key" header
//	if err != nil {
//		return err
//	}
//	timeout, err := middleware.Timeout(&middleware.TimeoutConfig{Default: time.Minute})
//	if err != nil {
//		return err
//	}
//	pool, err := worker.NewPool(driver, mux, &worker.Config{
//		Middleware: []conveyor.Middleware{
//			middleware.Recover(),
//			middleware.Logging(logger, nil),
//			timeout,
//			limit,
//			once,
//		},
//	})
//
// Middleware that can be misconfigured take a config pointer (nil means
// defaults where defaults exist) and return an error instead of panicking.
// RateLimit and Idempotency hand a job back with conveyor.Job.Postpone when
// it cannot run yet (over the limit; its key held by another run): that is
// not a failed attempt, and they return nil, the job being settled. See
// docs/middleware.md for keys, TTLs and the tests behind each promise.
package middleware
