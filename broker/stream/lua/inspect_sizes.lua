-- inspect_sizes.lua: the sizes and counters of one queue, read atomically
-- (Inspector.QueueSizes), after one step of the discard list's age
-- retention (queue_tail in internal/inspect's lib.lua). Ready is the
-- stream's length less the group's pending count (inspect_lib.lua says
-- why); an entry deleted from the stream by hand while pending counts as in
-- flight until a fetch drops it from the PEL, so ready is never negative.
--
-- KEYS[1] <prefix>:{<queue>}:stream        STREAM with the consumer group ARGV[1]
-- KEYS[2] <prefix>:{<queue>}:delayed       ZSET timer ID, score = due time (unix ms)
-- KEYS[3] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[4] <prefix>:{<queue>}:dead_dropped  STRING count of records the count cap trimmed
-- KEYS[5] <prefix>:{<queue>}:dead_expired  STRING count of records the age limit trimmed
-- KEYS[6] <prefix>:{<queue>}:stats         HASH processed, failed: cumulative counters
-- KEYS[7] <prefix>:{<queue>}:group_msgs    HASH the jobs waiting in FIFO groups' lines (internal/groups)
-- KEYS[8] <prefix>:{<queue>}:limit_wait    ZSET the concurrency limits' lines (internal/limits)
-- ARGV[1] consumer group name
-- ARGV[2] max age of discard records, ms (<= 0: no age limit)
-- Reply: {ready, in flight, then queue_tail's nine figures}.
-- Bounded: O(1) reads, at most 100 records dropped for age.

local ready, inflight = 0, 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  inflight = pending_count(KEYS[1], ARGV[1])
  ready = math.max(0, redis.call('XLEN', KEYS[1]) - inflight)
end
local out = {ready, inflight}
local tail = queue_tail(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[2], KEYS[7], KEYS[8])
for i = 1, #tail do
  out[#out + 1] = tail[i]
end
return out
