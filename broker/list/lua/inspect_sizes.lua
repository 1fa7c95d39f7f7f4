-- inspect_sizes.lua: the sizes and counters of one queue, read atomically
-- (Inspector.QueueSizes), after one step of the discard list's age
-- retention (queue_tail in internal/inspect's lib.lua).
--
-- KEYS[1] <prefix>:{<queue>}:ready         LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease         ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:delayed       ZSET timer ID, score = due time (unix ms)
-- KEYS[4] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[5] <prefix>:{<queue>}:dead_dropped  STRING count of records the count cap trimmed
-- KEYS[6] <prefix>:{<queue>}:dead_expired  STRING count of records the age limit trimmed
-- KEYS[7] <prefix>:{<queue>}:stats         HASH processed, failed: cumulative counters
-- KEYS[8] <prefix>:{<queue>}:group_msgs    HASH the jobs waiting in FIFO groups' lines (internal/groups)
-- KEYS[9] <prefix>:{<queue>}:limit_wait    ZSET the concurrency limits' lines (internal/limits)
-- ARGV[1] max age of discard records, ms (<= 0: no age limit)
-- Reply: {ready, in flight, then queue_tail's nine figures}.
-- Bounded: O(1) reads, at most 100 records dropped for age.

local out = {redis.call('LLEN', KEYS[1]), redis.call('ZCARD', KEYS[2])}
local tail = queue_tail(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[1], KEYS[8], KEYS[9])
for i = 1, #tail do
  out[#out + 1] = tail[i]
end
return out
