// Package brokertest is the conformance suite for broker.Driver: the
// contract every driver of Conveyor's broker seam passes, in Conveyor's own
// repository (broker/list, broker/stream, broker/pubsub) and outside it.
//
// A driver's test runs the suite with a Factory that builds the driver on
// the suite's Redis client, keeping every key under the prefix it is given:
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, func(t *testing.T, prefix string) broker.Driver {
//			d, err := mydriver.New(brokertest.Client(t), &mydriver.Config{Prefix: prefix})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return d
//		})
//	}
//
// Run it like any Go test, always with the race detector:
//
//	go test -race -run TestConformance ./mydriver/
//	go test -race -run 'TestConformance/StaleAckRefused' ./mydriver/
//
// The suite needs a real Redis 7.0 or later: CONVEYOR_TEST_REDIS_URL
// (default redis://127.0.0.1:6379/0), or CONVEYOR_TEST_REDIS_CLUSTER with
// comma-separated seeds for a Redis Cluster. It fails, rather than skips,
// when Redis is unreachable. It never flushes a database: each test runs in
// parallel with a prefix of its own and deletes the keys under it when done.
//
// Each test is a subtest named after what it proves (RoundTrip, Batch, FIFO,
// RedeliveryAfterLeaseExpiry, StaleAckRefused, ExtendKeepsLease, FetchCancel,
// FetchWakes, FetchAfterClose, ExclusiveDelivery, FanOut, Retry, Release,
// Postpone, UniqueKey, Discard, PoisonDiscarded, UndecodableDiscarded,
// DiscardsInspect,
// DiscardsRedriveOne, DiscardsRedriveFilter, DiscardsPurge,
// DiscardsCountRetention, DiscardsAgeRetention, DiscardsBounded,
// DelayedEnqueue, TimerCancel,
// TimerCancelAfterPromotion, TimerReschedule, TimerDuplicateID,
// TimerPendingPages, TimerPromoteOnce, TimerNeverEarly, TimerRetryClash,
// TimerWake, CronFireOnce, CronSeries, InspectQueues, InspectSizes, InspectListJobs,
// InspectFindJob, InspectPurge, InspectHostileQueueNames, DeleteQueue,
// UnsupportedOperations, NoKeysLeft, HostileQueueNames, InvalidMessages,
// Check) and is skipped, saying why, when the driver's Capabilities do not
// call for it, (the Inspect tests) it does not implement the optional
// broker.Inspector, (DeleteQueue) the optional broker.QueueDeleter,
// (CronSeries) the optional broker.CronLister, or (UndecodableDiscarded)
// its test does not provide a RawStorer. A driver
// is correct when
// the suite passes; a change of driver semantics extends this suite, not one
// driver's tests.
//
// What the suite assumes of a driver beyond the broker interfaces:
//
//   - Every key it stores starts with "<prefix>:", and every key of a queue
//     is "<prefix>:{<queue>}:<part>" (NoKeysLeft and HostileQueueNames scan
//     the prefix). Two kinds of key may outlive a drained queue: the queue
//     registry "<prefix>:queues" and a queue's counters
//     "<prefix>:{<queue>}:stats" (internal/redistest.Bookkeeping).
//   - A driver that implements broker.Inspector (and has AtLeastOnce,
//     Delay and Discard) is held to it by the Inspect tests: Queues lists
//     the queues it enqueued to or opened, QueueSizes counts every state
//     and the processed and failed counters, ListJobs pages ready jobs in
//     the order Fetch hands them out. One that also implements
//     broker.QueueDeleter is held to it by DeleteQueue: a delete leaves no
//     key starting "<prefix>:{<queue>}:" (a SCAN of the prefix), counts
//     in QueueDeletion.Keys the keys it deleted there, and takes the queue
//     out of Queues.
//   - With Capabilities.Discard, the discard queue is the key
//     "<prefix>:{<queue>}:dead" whose records read
//     "d1,<unix ms>,<len(reason)>:<reason><message>", the message in
//     Conveyor's stored encoding (docs/redis-keys.md), and the driver
//     implements broker.Discards. The Discards tests write records into that
//     key to test retention without waiting, so for them it is a LIST,
//     newest first, as the Redis drivers keep it, and DiscardStats states
//     the retention in force (a cap of 2,500 records or more, and an age
//     limit).
//   - With Capabilities.Delay, the driver implements broker.Timers: a
//     message with a RunAt ahead, or retried to a later time, is a timer
//     that only Timers.Promote makes fetchable (the suite runs a
//     delay.Promoter, see Promote, where a test needs one). A cron series'
//     last-fire record is the only key allowed to outlive a test, and only
//     with a TTL no longer than the keep it was given.
//   - UndecodableDiscarded stores values no driver writes (an 11-digit
//     counter, an ID length past the end, a body that does not decode, a
//     value that is no stored message) through the optional RawStorer,
//     which a driver's test provides by wrapping the driver in its
//     Factory; it is skipped for a driver without it.
//   - Lease expiry is noticed by the consumers of the queue themselves: a
//     consumer blocked in Fetch receives an expired message within seconds,
//     with no other process running. The suite accepts both ways of measuring
//     expiry: from the holder's LeaseDeadline (a lease sorted set) or from
//     the claiming consumer's visibility timeout (XAUTOCLAIM's idle time).
//     Either way nothing is redelivered before the holder's LeaseDeadline.
//
// The suite waits for events with deadlines, never with sleeps. Its timing
// bounds (a cancelled Fetch returns within 500ms, a blocked Fetch wakes
// within a second of an Enqueue) are promptness checks, loose enough for the
// race detector on a small machine and tight enough to catch a polling loop.
package brokertest
