-- page.lua: one page of a queue's discard list, newest first, after a step
-- of age retention, so the page holds no record past the maximum age (the
-- Go side runs it again when the step dropped as many as it may: more may
-- be due).
--
-- KEYS[1] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[2] <prefix>:{<queue>}:dead_expired  STRING count of records dropped for age
-- ARGV[1] max age, ms (<= 0: no age limit)
-- ARGV[2] offset, >= 0
-- ARGV[3] limit, 1..1000
-- Reply: {dropped for age by this call, records held, rec1, rec2, ...}.
-- Bounded: ARGV[3] records, 100 dropped.

local dead = KEYS[1]
local expired = discard_expire(dead, KEYS[2], ARGV[1], now_ms())
local off = tonumber(ARGV[2])
local out = {expired, redis.call('LLEN', dead)}
local recs = redis.call('LRANGE', dead, off, off + tonumber(ARGV[3]) - 1)
for i = 1, #recs do
  out[#out + 1] = recs[i]
end
return out
