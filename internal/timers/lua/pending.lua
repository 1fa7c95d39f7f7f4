-- pending.lua: one page of a queue's pending timers, earliest first, read
-- in one script so that each ID comes with its body and due time.
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers   HASH timer ID -> stored message
-- ARGV[1] offset, >= 0
-- ARGV[2] limit, 1..1000
-- Reply: {count pending, due1, body1, due2, body2, ...}; a timer without a
-- body (written by hand) is left out.
-- Bounded: ARGV[2] timers.

local delayed, timers = KEYS[1], KEYS[2]
local off = tonumber(ARGV[1])
local page = redis.call('ZRANGE', delayed, off, off + tonumber(ARGV[2]) - 1, 'WITHSCORES')
local out = {redis.call('ZCARD', delayed)}
if #page == 0 then
  return out
end
local ids = {}
for i = 1, #page, 2 do
  ids[#ids + 1] = page[i]
end
local vs = redis.call('HMGET', timers, unpack(ids))
for i = 1, #ids do
  if vs[i] then
    out[#out + 1] = page[2 * i]
    out[#out + 1] = vs[i]
  end
end
return out
