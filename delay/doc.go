// Package delay is Conveyor's time axis: timers by business key, the
// promoter that fires them on time, and cron.
//
// A job enqueued with a delay or a run-at is a timer: it waits in Redis, in
// its queue's delayed ZSET (member = the job ID, score = due time in
// milliseconds), until a Promoter moves it to the ready queue, atomically
// and exactly once however many promoters run. A promoter sleeps until the
// next due time, by the Redis server's clock, and is woken early when a
// sooner timer is added. worker.Pool runs one for its queue.
//
//	// Schedule: the ID is the business key.
//	_, err := client.Enqueue(ctx, "order.timeout", args,
//		&conveyor.EnqueueOptions{ID: "order:123:timeout", Delay: 30 * time.Minute})
//	// Paid: exactly one of Cancel and the timer's firing wins.
//	cancelled, err := client.Cancel(ctx, "", "order:123:timeout")
//
// conveyor.Client cancels and moves pending timers (Cancel, Reschedule),
// conveyor.Inspector lists them (Jobs with JobDelayed); Cron enqueues jobs on
// cron specs (robfig/cron syntax, seconds optional, time zones), each fire
// once across any number of instances.
//
// docs/delay.md and docs/cron.md describe the model, the guarantees and the
// limits.
package delay
