// Package worker runs jobs: a Pool fetches jobs from one queue, or from
// several by weight or strict priority, runs each through the middleware
// chain and a handler (usually a Mux that routes by kind), and settles it.
//
//	mux := worker.NewMux()
//	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
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
//   - keeps a room of fetched jobs waiting so that fetch round trips
//     overlap running jobs (Prefetch; unset, Concurrency, and for a pool
//     of one queue growing to 32, or twice Concurrency, while short jobs
//     have a backlog, and back when jobs wait behind busy workers), and
//     acks finished jobs in shared
//     round trips;
//   - extends the leases of running jobs every HeartbeatInterval, and cancels
//     a handler whose lease is lost (context cause broker.ErrLeaseLost);
//   - settles what the handler left unsettled: nil → ack; error → retry with
//     backoff (conveyor.RetryAfter overrides), or discard after MaxAttempts
//     or for conveyor.SkipRetry; a panic is an error with its stack;
//   - shuts down gracefully: stop fetching, let running jobs finish for
//     ShutdownGrace, then cancel them (cause ErrShutdown) and hand their jobs
//     back to the queue at once.
//
// # Several queues
//
// Set Config.Queues instead of Config.Queue (not both: that is an error) to
// serve several queues from one pool, each with a weight:
//
//	pool, err := worker.NewPool(driver, mux, &worker.Config{
//		Queues:           map[string]int{"critical": 6, "default": 3, "low": 1},
//		QueueConcurrency: map[string]int{"low": 2}, // at most 2 of low's jobs held at once
//		Concurrency:      20,
//	})
//
// While every queue has jobs, 6 of every 10 jobs started are critical's, 3
// default's and 1 low's (a smooth weighted round robin: low's turn comes
// every 10 jobs, so it is never starved); a queue with nothing ready gives
// its share to the others. With StrictPriority the highest weight goes
// first (weights must then differ): a lower queue is fetched only while
// every higher one is empty, paused or at its QueueConcurrency cap, so a
// busy high queue starves the lower ones. Handlers are routed by kind
// whichever queue a job came from; Job.Queue says which. Pausing one queue
// (conveyor.Inspector.Pause) stops its jobs only. Each queue elects its own
// keeper (timer promotion, expired leases) among the pools that serve it,
// one per queue across the fleet, and the pool's entry in the worker
// registry lists all its queues.
//
// What it costs: each queue has its own fetch, and an empty queue's fetch
// sleeps in Redis on the queue's wake signal until a job arrives, however
// busy the other queues are (with the list and stream drivers it looks
// again once a minute). With the list and stream drivers each such wait holds one
// connection of the go-redis client, and so does the pool's wait in each
// queue's keeper election (unless it is that queue's keeper or heir): an
// idle pool of N queues holds up to 2×N connections blocked. go-redis's
// PoolSize defaults to 10 per GOMAXPROCS; raise it when the pools sharing a
// client serve many queues, or other commands wait PoolTimeout for a
// connection and fail. Each queue also keeps a small buffer of fetched,
// leased jobs beside the Prefetch room: with weights, about 2×Concurrency in
// all, split by weight; with StrictPriority, up to Concurrency per queue.
// A crash sends them back too.
package worker
