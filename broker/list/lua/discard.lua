-- discard.lua: move one delivery to the queue's discard list with a reason,
-- keeping at most ARGV[4] records, none older than ARGV[5] (the oldest are
-- trimmed and counted, see internal/discards' lib.lua). Fenced like ack.lua.
-- A discard ends a failed handler run: the queue's stats HASH counts it
-- (field failed). Poison discards (fetch.lua, reap.lua) are crash
-- recoveries, not failures, and are not counted.
--
-- KEYS[1] <prefix>:{<queue>}:lease         ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[2] <prefix>:{<queue>}:inflight      HASH receipt -> stored message
-- KEYS[3] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[4] <prefix>:{<queue>}:dead_dropped  STRING count of records the count cap trimmed
-- KEYS[5] <prefix>:{<queue>}:dead_expired  STRING count of records the age limit trimmed
-- KEYS[6] <prefix>:{<queue>}:stats         HASH processed, failed: cumulative counters
-- KEYS[7] <prefix>:{<queue>}:reclaimed     ZSET receipt of a lease a reclaim took, score = when (unix ms); see lib.lua
-- KEYS[8] <prefix>:{<queue>}:done          HASH job ID -> record of a finished job (internal/records)
-- KEYS[9] <prefix>:{<queue>}:done_at       ZSET job ID, score = when its record expires (unix ms)
-- KEYS[10] <prefix>:{<queue>}:done_counts  HASH expired, dropped
-- KEYS[11] <prefix>:{<queue>}:ready        LIST of stored messages
-- KEYS[12] <prefix>:{<queue>}:wake         ZSET wake signal, set when a job joins ready
-- KEYS[13..16] the queue's group keys (internal/groups): the discarded
--          job lets the next of its group in
-- KEYS[17..22] the queue's limit keys (internal/limits): the delivery's
--          slots are given back
-- ARGV[1] the delivery's receipt
-- ARGV[2] its token (the receipt up to the first ',')
-- ARGV[3] reason
-- ARGV[4] max discard records kept, >= 1
-- ARGV[5] max age of discard records, ms (<= 0: no age limit)
-- ARGV[6] keep the job's record this long, ms (0: write none; KEYS[8..10]
--         are then not touched)
-- ARGV[7] the job's ID, ARGV[8] its record's JSON, ARGV[9] the cap on the
--         queue's records
-- Reply: "OK"; "LEASE_LOST" (a reclaim took the lease, or the token is not
-- the receipt's) or "GONE" (no reclaim did: a settle ended it), as for
-- ack.lua.

local r = ARGV[1]
if string.sub(r, 1, #ARGV[2] + 1) ~= ARGV[2] .. ',' then
  return 'LEASE_LOST'
end
-- Read before the first write: Redis keeps what a script wrote before a
-- command of it failed, so a discard list of another type (written by
-- hand) must fail the call with the lease in place, not after the ZREM
-- with the message in neither place.
local v = redis.call('HGET', KEYS[2], r)
redis.call('LLEN', KEYS[3])
redis.call('LLEN', KEYS[11]) -- ready, where the group's next jobs go
-- ZREM is the lease check: it removes the member only if it is still there.
if redis.call('ZREM', KEYS[1], r) == 0 then
  return lost_status(KEYS[7], r)
end
if not v then
  return 'LEASE_LOST' -- a lease without its message: written by hand
end
redis.call('HDEL', KEYS[2], r)
discard(discard_list(KEYS[3], KEYS[4], KEYS[5], ARGV[4], ARGV[5]), now_ms(), ARGV[3], v)
redis.call('HINCRBY', KEYS[6], 'failed', 1)
group_end_push(group_keys(13), {v}, KEYS[11], 'list', nil, KEYS[12])
limit_release(limit_keys(17), KEYS[11], KEYS[12], {r})
if tonumber(ARGV[6]) > 0 then
  record_put(KEYS[8], KEYS[9], KEYS[10], now_ms(), ARGV[9], ARGV[7], ARGV[6], ARGV[8])
end
return 'OK'
