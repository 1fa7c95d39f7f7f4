-- retry.lua: hand one delivery back to be run again at a time, counting a
-- failed attempt (attempt+ARGV[4]; deliveries+1 for the next delivery,
-- lib.lua). Consumer.Retry counts one, Consumer.Postpone none.
-- Due now or earlier: the back of ready; later: a timer under the message's
-- ID (or a free variant of it, see timer_free), which wakes the promoters
-- when it is the earliest. The wake-up's PUBLISH comes first, so that a
-- user the ACL refuses it fails the call with nothing written. Fenced like
-- ack.lua. A retry (ARGV[4] > 0) is a failed handler run: the queue's stats
-- HASH counts it (field failed). A delivery whose job was cancelled
-- (internal/cancels) is not handed back: its job is removed, as an ack
-- removes it, and its mark with it.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:inflight  HASH receipt -> stored message
-- KEYS[4] <prefix>:{<queue>}:delayed   ZSET timer ID, score = due time (unix ms)
-- KEYS[5] <prefix>:{<queue>}:timers    HASH timer ID -> stored message
-- KEYS[6] <prefix>:{<queue>}:stats     HASH processed, failed: cumulative counters
-- KEYS[7] <prefix>:{<queue>}:reclaimed ZSET receipt of a lease a reclaim took, score = when (unix ms); see lib.lua
-- KEYS[8] <prefix>:{<queue>}:wake      ZSET wake signal (see lib.lua), set when the message joins ready
-- KEYS[9] <prefix>:{<queue>}:canceled  ZSET receipt of a cancelled delivery (internal/cancels)
-- KEYS[10..13] the queue's group keys (internal/groups): a cancelled job
--   that ends here lets the next of its group in
-- KEYS[14..19] the queue's limit keys (internal/limits): the delivery's
--          slots are given back
-- ARGV[1] the delivery's receipt
-- ARGV[2] its token (the receipt up to the first ',')
-- ARGV[3] the wait until it is due, ms from the server's now (0: now)
-- ARGV[4] attempt increment: 1 (retry) or 0 (postpone)
-- Reply: "OK"; "LEASE_LOST" (a reclaim took the lease, or the token is not
-- the receipt's) or "GONE" (no reclaim did: a settle ended it), as for
-- ack.lua.

local ready, lease, inflight, delayed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local r, wait = ARGV[1], tonumber(ARGV[3])
if string.sub(r, 1, #ARGV[2] + 1) ~= ARGV[2] .. ',' then
  return 'LEASE_LOST'
end
-- The message is read first: a timer needs its ID before the first write.
local v = redis.call('HGET', inflight, r)
local d, a, rec, id, tail
if v then
  d, a, rec, id, tail = parse(v)
end
local tid, at
if d and wait > 0 then
  tid, at = timer_free(delayed, id), due(now_ms_up(), wait)
end
if tid then
  timer_wake(delayed, timer_head(delayed), at) -- before the first write (see timer_wake)
end
-- Every lease has its message (lib.lua): no message, no lease.
if not v then
  return lost_status(KEYS[7], r)
end
-- ZREM is the lease check: it removes the member only if it is still there
-- (a message without its lease, or one that does not parse, was written by
-- hand).
local deadline = redis.call('ZSCORE', lease, r) -- to put the lease back
-- ready is read before the take: a ready key of another type fails here,
-- not after the jobs let in from a line (move) were taken out of it.
redis.call('LLEN', ready)
if not d or redis.call('ZREM', lease, r) == 0 then
  return 'LEASE_LOST'
end
redis.call('HDEL', inflight, r)
local inc = tonumber(ARGV[4])
-- move stores the message again: Redis keeps the ZREM and HDEL above if a
-- later command fails (a key of another type, written by hand; a command
-- the ACL refuses), so a failure puts the lease and its message back
-- before it is raised, and the job, still leased, is not lost.
local function move()
  limit_release(limit_keys(14), ready, KEYS[8], {r})
  if canceled_among(KEYS[9], {r})[r] then
    redis.call('ZREM', KEYS[9], r)
    return false, group_end_push(group_keys(10), {v}, ready, 'list', nil, nil) > 0
  end
  local nv = build(d + 1, a + inc, rec, tail)
  if tid then
    timer_put(delayed, KEYS[5], tid, at, nv)
    return true, false
  end
  redis.call('LPUSH', ready, nv)
  return true, true
end
local moved, retried, pushed = pcall(move)
if not moved then
  redis.call('ZADD', lease, deadline, r)
  redis.call('HSET', inflight, r, v)
  error(retried, 0)
end
-- The wake signal goes once the message is stored, outside move: a signal
-- that cannot be set (its key of another type) must neither put back a
-- lease whose message is stored nor report a retry that landed as failed.
if pushed then
  redis.pcall('ZADD', KEYS[8], 0, 'w')
end
-- Counted last, outside move: a counter that cannot be incremented must
-- not put back a lease whose message is stored again.
if retried and inc > 0 then
  redis.call('HINCRBY', KEYS[6], 'failed', 1)
end
return 'OK'
