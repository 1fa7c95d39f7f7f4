// Package conveyor is a job framework on Redis: producers enqueue jobs by
// kind, a worker pool runs them through a middleware chain and settles each
// one (done, retry later, or discard), with leases so that a crashed worker's
// jobs run again and a stalled worker cannot settle a job it lost.
//
// A tour, from handler to running pool:
//
//	// 1. A handler, typed at the edge.
//	type Receipt struct{ OrderID string }
//	mux := worker.NewMux()
//	worker.HandleJSON(mux, "email.receipt", func(ctx context.Context, job *conveyor.Job, r Receipt) error {
//		return sendReceipt(ctx, r.OrderID)
//	})
//
//	// 2. A driver on your Redis (list: at-least-once, FIFO).
//	d, err := list.New(rdb, nil)
//
//	// 3. Enqueue from anywhere.
//	client, err := conveyor.NewClient(d, nil)
//	_, err = client.Enqueue(ctx, "email.receipt", Receipt{OrderID: "123"}, nil)
//
//	// 4. Run the pool until ctx is cancelled; it drains running jobs and hands
//	// back what it could not finish.
//	pool, err := worker.NewPool(d, mux, &worker.Config{Concurrency: 20})
//	err = pool.Run(ctx)
//
// The packages: broker (the driver seam) with broker/list, broker/stream and
// broker/pubsub; worker (the pool); this package (Job, Handler, Middleware,
// Client, Inspector). docs/architecture.md explains how they fit.
//
// Who does what: application code enqueues, cancels and reschedules its jobs
// through a Client; operators' tools read and repair queues (pages of jobs,
// re-drive, purge, pause) through an Inspector; handlers see a Job.
//
// # For runners
//
// NewJob, Settler and FinishJob are the plumbing between a runner (the
// worker pool, contrib/conveyortest's Runner) and a Job: NewJob binds a
// delivery to the Settler that carries out its settle calls, and FinishJob
// tells the job's OnFinish observers how its delivery ended. Handlers never
// call them; a unit test of a handler function may build its Job with
// NewJob(delivery, nil).
package conveyor
