-- retry.lua: hand one delivery back to be run again at a time, counting a
-- failed attempt (attempt+ARGV[4]; deliveries+1 for the next delivery,
-- lib.lua). Consumer.Retry counts one, Consumer.Postpone none.
-- Due now or earlier: the back of ready; later: a timer under the message's
-- ID (or a free variant of it, see timer_free), which wakes the promoters
-- when it is the earliest. The wake-up's PUBLISH comes first, so that a
-- user the ACL refuses it fails the call with nothing written. Fenced like
-- ack.lua. A retry (ARGV[4] > 0) is a failed handler run: the queue's stats
-- HASH counts it (field failed).
--
-- KEYS[1] <prefix>:{<queue>}:ready    LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease    ZSET stored message in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[4] <prefix>:{<queue>}:timers   HASH timer ID -> stored message
-- KEYS[5] <prefix>:{<queue>}:stats    HASH processed, failed: cumulative counters
-- ARGV[1] stored message (the delivery's receipt)
-- ARGV[2] token (deliveries as a decimal string)
-- ARGV[3] the wait until it is due, ms from the server's now (0: now)
-- ARGV[4] attempt increment: 1 (retry) or 0 (postpone)
-- Reply: "OK" or "LEASE_LOST".

local ready, lease, delayed = KEYS[1], KEYS[2], KEYS[3]
local v, wait = ARGV[1], tonumber(ARGV[3])
local d, a, r, id, tail = parse(v)
local tid, at
if d and wait > 0 then
  tid, at = timer_free(delayed, id), due(now_ms_up(), wait)
end
if tid then
  timer_wake(delayed, timer_head(delayed), at) -- before the first write (see timer_wake)
end
-- ZREM is the lease check: it removes the member only if it is still there.
if not d or d ~= ARGV[2] or redis.call('ZREM', lease, v) == 0 then
  return 'LEASE_LOST'
end
local inc = tonumber(ARGV[4])
v = build(d + 1, a + inc, r, tail)
if tid then
  timer_put(delayed, KEYS[4], tid, at, v)
else
  redis.call('LPUSH', ready, v)
end
-- Counted last: a counter that cannot be incremented (a key of another
-- type) must not abort the script between the ZREM and the push.
if inc > 0 then
  redis.call('HINCRBY', KEYS[5], 'failed', 1)
end
return 'OK'
