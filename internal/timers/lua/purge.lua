-- purge.lua: one bounded step of a purge of a queue's pending timers:
-- deletes up to ARGV[1] of them, earliest due first, body and all, in one
-- script so that no timer is left half deleted and none is promoted after
-- it was purged.
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers   HASH timer ID -> stored message
-- ARGV[1] max timers to delete, 1..1000
-- Reply: {deleted, pending before this call}.
-- Bounded: ARGV[1] timers.

local delayed, timers = KEYS[1], KEYS[2]
local held = redis.call('ZCARD', delayed)
local ids = redis.call('ZRANGE', delayed, 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  redis.call('ZREM', delayed, unpack(ids))
  redis.call('HDEL', timers, unpack(ids))
end
return {#ids, held}
