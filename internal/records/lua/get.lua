-- get.lua: the record of one job, after a step of retention.
--
-- KEYS[1] <prefix>:{<queue>}:done         HASH job ID -> record
-- KEYS[2] <prefix>:{<queue>}:done_at      ZSET job ID, score = expiry (unix ms)
-- KEYS[3] <prefix>:{<queue>}:done_counts  HASH expired, dropped
-- ARGV[1] job ID
-- Reply: the record, or false when there is none. Bounded: one step.
local now = now_ms()
record_expire(KEYS[1], KEYS[2], KEYS[3], now)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) <= now then
  return false
end
return redis.call('HGET', KEYS[1], ARGV[1])
