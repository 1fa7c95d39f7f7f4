// Package shard splits a queue into partitions so that one queue can use
// the cores of several Redis Cluster masters. A Driver wraps a list or
// stream driver; each partition is a queue of that driver under a name of
// its own (queue#s), with its own hash tag, chosen so that the partitions'
// hash slots spread evenly over the cluster's 16,384 slots. Producers,
// pools, promoters, the Inspector, the CLI and the dashboard use the
// logical queue's name and never see a partition.
//
//	inner, err := list.New(rdb, &list.Config{Prefix: "app"})
//	d, err := shard.New(inner, shard.Config{Queues: map[string]int{"orders": 6}})
//	client, err := conveyor.NewClient(d, nil)
//	pool, err := worker.NewPool(d, mux, &worker.Config{Queue: "orders"})
//
// # Where a job goes
//
// A job with a Group goes to the partition its group hashes to, so the
// jobs of one group keep their order and their limit (docs/ordering.md);
// a job with a UniqueKey to the one its key hashes to, so a duplicate
// meets its original; any other job to the one its ID hashes to, so that
// Cancel, Reschedule, CancelJob and the Inspector's look-ups by ID ask
// that partition first and the others only when it does not hold the ID
// (a job routed by its group or unique key). A cron series keeps its
// fires in the partition its name hashes to. An ID is unique within a
// partition: two jobs of one ID routed to different partitions (by
// different groups or unique keys) are both stored.
//
// # Consuming
//
// A consumer of a split queue opens one consumer of the inner driver per
// partition. Each Fetch takes jobs from the partitions in turn, starting
// one further at each call, until it holds what it asked for. A partition
// found empty is parked: it sleeps in Redis on its own wake signal
// (broker.Sleeper), leasing nothing, and later Fetch calls pass over it at
// no cost until a job comes. When every partition sleeps, Fetch waits for
// the first to wake: a kept consumer's (a pool's) partitions sleep until
// a job comes, others look again after a second or so, as on a whole
// queue. A partition that wakes while no Fetch of its consumer is under
// way (the pool's workers are busy) gives the wake-up back to the queue's
// other consumers. Each sleeping partition holds a connection of the
// client's pool. The settles of one batch go to their partitions at the
// same time.
//
// # What changes on a split queue
//
//   - Order: jobs of different partitions run in no set order (groups keep
//     theirs); Capabilities reports FIFO false.
//   - Limits (SetLimit) are split between the partitions, each holding its
//     share, so a limit must be at least the partition count.
//   - Each partition keeps its own discard queue with the inner driver's
//     retention, so a split queue keeps up to partitions × that count.
//   - Inspector lists merge the partitions' pages in the state's order;
//     PurgeDelayed with a maximum purges the earliest timers of the whole
//     queue, while PurgeReady, Redrive and PurgeDiscarded with a maximum
//     take from the partitions one after the other (oldest first within
//     each).
//   - Each partition stores its jobs on its own: MaxLen applies per
//     partition, and a refused partition's *broker.QueueError names the
//     messages it refused (QueueError.Messages).
//   - Pause and resume act on every partition; one keeper, elected on the
//     first partition, promotes timers and reaps leases for all of them.
//
// # Changing the partition count
//
// The count is recorded in Redis (<prefix>:{<queue>}:partitions) on the
// queue's first use. A Driver configured with another count refuses the
// queue with a *CountError: groups and unique keys would be routed to
// other partitions than their earlier jobs. To change it, drain the queue
// and delete it (Inspector.DeleteQueue, conveyor delete), or move to a
// queue of a new name (docs/scale-out.md). A queue that holds jobs stored
// whole when a Driver first splits it is recorded as whole, and refused
// likewise. A plain driver, not wrapped, reads no recorded count: every
// process that uses a split queue needs the same Config.
package shard
