-- delete.lua: delete a queue (Inspector.DeleteQueue, broker.QueueDeleter):
-- count its jobs in each state and, unless jobs are in flight and the
-- delete is not forced, DEL every key of the queue whose name the driver
-- knows, in one command, atomically with the count. Keys whose names hold
-- data (unique keys, cron records, the waits' own keys) are found and
-- deleted from Go afterwards (SCAN), and the registry entry last; see
-- internal/inspect's Deleter.
--
-- KEYS[1]  <prefix>:{<queue>}:ready                LIST of stored messages
-- KEYS[2]  <prefix>:{<queue>}:lease                ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3]  <prefix>:{<queue>}:inflight             HASH receipt -> stored message in flight
-- KEYS[4]  <prefix>:{<queue>}:delayed              ZSET timer ID, score = due time (unix ms)
-- KEYS[5]  <prefix>:{<queue>}:timers               HASH timer ID -> stored message
-- KEYS[6]  <prefix>:{<queue>}:dead                 LIST of discard records, newest first
-- KEYS[7]  <prefix>:{<queue>}:dead_dropped         STRING count of records the count cap trimmed
-- KEYS[8]  <prefix>:{<queue>}:dead_expired         STRING count of records the age limit trimmed
-- KEYS[9]  <prefix>:{<queue>}:stats                HASH processed, failed: cumulative counters
-- KEYS[10] <prefix>:{<queue>}:reclaimed            ZSET receipts of leases a reclaim took
-- KEYS[11] <prefix>:{<queue>}:wake                 ZSET the wake signal (internal/wake)
-- KEYS[12] <prefix>:{<queue>}:paused               STRING present while the queue is paused
-- KEYS[13] <prefix>:{<queue>}:keeper               STRING the keeper's lease (internal/elect)
-- KEYS[14] <prefix>:{<queue>}:keeper_heir          STRING the heir's lease
-- KEYS[15] <prefix>:{<queue>}:keeper_heir:baton    ZSET the standbys' wake signal
-- KEYS[16] <prefix>:{<queue>}:canceled             ZSET marks of cancelled deliveries (internal/cancels)
-- KEYS[17] <prefix>:{<queue>}:done                 HASH records of finished jobs (internal/records)
-- KEYS[18] <prefix>:{<queue>}:done_at              ZSET their retention index
-- KEYS[19] <prefix>:{<queue>}:done_counts          HASH what retention dropped
-- KEYS[20..23] the queue's group keys (internal/groups): group_jobs, groups,
--          group_wait, group_msgs (whose jobs count as ready here)
-- KEYS[24..29] the queue's limit keys (internal/limits): limits,
--          limit_state, limit_of, limit_wait (whose jobs count as ready
--          here), limit_msgs, limit_jobs
-- KEYS[30] <prefix>:{<queue>}:history              STREAM samples of sizes and counters (internal/history)
-- KEYS[31] <prefix>:{<queue>}:cron_series          ZSET the index of its cron series (internal/timers)
-- ARGV[1]  "1": delete even while jobs are in flight; else refuse then
-- Reply: {1 deleted or 0 refused (jobs in flight; nothing deleted), ready,
-- in flight, delayed, discarded, keys deleted}.
-- Bounded: O(1) reads and one DEL of 31 keys, which frees every job of the
-- queue: O(jobs held), the one cost of a delete that grows with the queue.

local ready = redis.call('LLEN', KEYS[1]) + redis.call('HLEN', KEYS[23]) + redis.call('ZCARD', KEYS[27])
local inflight = redis.call('ZCARD', KEYS[2])
local delayed = redis.call('ZCARD', KEYS[4])
local discarded = redis.call('LLEN', KEYS[6])
if inflight > 0 and ARGV[1] ~= '1' then
  return {0, ready, inflight, delayed, discarded, 0}
end
local n = redis.call('DEL', unpack(KEYS))
return {1, ready, inflight, delayed, discarded, n}
