-- stats.lua: the figures of a queue's records, after a step of retention.
--
-- KEYS[1] <prefix>:{<queue>}:done         HASH job ID -> record
-- KEYS[2] <prefix>:{<queue>}:done_at      ZSET job ID, score = expiry (unix ms)
-- KEYS[3] <prefix>:{<queue>}:done_counts  HASH expired, dropped
-- Reply: {records held, expired, dropped}. Bounded: one step.
local now = now_ms()
record_expire(KEYS[1], KEYS[2], KEYS[3], now)
local c = redis.call('HMGET', KEYS[3], 'expired', 'dropped')
return {redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'), tonumber(c[1]) or 0, tonumber(c[2]) or 0}
