-- page.lua: a page of a queue's records, the latest to expire first, after
-- a step of retention.
--
-- KEYS[1] <prefix>:{<queue>}:done         HASH job ID -> record
-- KEYS[2] <prefix>:{<queue>}:done_at      ZSET job ID, score = expiry (unix ms)
-- KEYS[3] <prefix>:{<queue>}:done_counts  HASH expired, dropped
-- ARGV[1] position to start at, >= 0
-- ARGV[2] records to return, 1..1000
-- Reply: {records held, record, ...}; a record gone from the HASH (written
-- by hand) is skipped. Bounded: one step and ARGV[2] records, after
-- ARGV[1] skipped.
local now = now_ms()
record_expire(KEYS[1], KEYS[2], KEYS[3], now)
-- Records past their time that the step left are neither counted nor
-- listed.
local live = '(' .. now
local out = {redis.call('ZCOUNT', KEYS[2], live, '+inf')}
local ids = redis.call('ZRANGE', KEYS[2], '+inf', live, 'BYSCORE', 'REV', 'LIMIT', tonumber(ARGV[1]), tonumber(ARGV[2]))
if #ids > 0 then
  for _, v in ipairs(redis.call('HMGET', KEYS[1], unpack(ids))) do
    if v then
      out[#out + 1] = v
    end
  end
end
return out
