// Package conveyortest helps test code that uses Conveyor without Redis and
// without sleeping: an in-memory broker.Driver, a fake Clock the test moves,
// helpers that assert what a code path enqueued, and a Runner that runs jobs
// through the application's real handlers and middleware inline.
//
//	func TestCheckout(t *testing.T) {
//		ctx := context.Background()
//		clock := conveyortest.NewClock(time.Time{})
//		d, _ := conveyortest.New(&conveyortest.Config{Clock: clock})
//		client, _ := conveyortest.NewClient(d, nil)
//
//		checkout(ctx, client, "order-1") // the code under test enqueues
//
//		job := conveyortest.RequireEnqueued[Receipt](t, d, "default", "email.receipt")
//		if job.Args.OrderID != "order-1" {
//			t.Errorf("receipt for %q", job.Args.OrderID)
//		}
//
//		runner, _ := conveyortest.NewRunner(d, app.Mux(), nil)
//		results, _ := runner.Drain(ctx, "default") // runs every ready job
//		clock.Advance(30 * time.Minute)           // timers and retries come due
//		results, _ = runner.Drain(ctx, "default")
//	}
//
// The Driver passes the conformance suite of broker/brokertest, so code that
// works on it works on the Redis drivers, with the same promises: leases and
// fencing, FIFO order, FIFO groups (EnqueueOptions.Group: a group's jobs
// run its limit at a time, in enqueue order), timers by ID with cancel and
// reschedule, cancelling a job by ID in any state (broker.Canceler; a
// running job's pool cancels its context), concurrency limits per queue
// and per kind (broker.Limiter, Driver.SetLimit: a slot taken at fetch and
// given back when the delivery ends or its lease expires, jobs over a
// limit waiting in its line without counting an attempt), a discard queue
// with re-drive, records of finished jobs (broker.Records), the Inspector.
// A worker.Pool, a conveyor.Client, a conveyor.Inspector and package delay
// run on it unchanged, for a test of the whole program in one process;
// with a fake Clock, timers, leases (and so the slots an expired lease
// held) and the retention of records move only when the test calls
// Advance. A limit holds the jobs of one Driver: the processes of a fleet
// share it only on Redis.
//
// Everything lives in the process's memory and goes with it: the Driver is
// for tests, never for production. docs/testing.md is the guide.
package conveyortest
