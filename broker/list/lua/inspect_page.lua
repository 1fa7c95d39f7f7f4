-- inspect_page.lua: one page of a queue's ready or in-flight messages
-- (Inspector.ListJobs), with the total, read atomically.
--
-- Ready messages come next-to-run first: the list is LPUSHed and RPOPed,
-- so position p from the right end is LRANGE index -(p+1). In-flight
-- messages come earliest lease deadline first.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:inflight  HASH receipt -> stored message
-- ARGV[1] "ready" or "in_flight"
-- ARGV[2] offset, >= 0
-- ARGV[3] limit, 1..1000
-- Reply: {total, v1, s1, v2, s2, ...}: stored messages, each with its lease
-- deadline (unix ms) in flight, 0 when ready (an in-flight message deleted
-- by hand from the inflight HASH comes as "").
-- Bounded: ARGV[3] messages (LRANGE and ZRANGE cost O(offset) to reach
-- the page at most).

local off, lim = tonumber(ARGV[2]), tonumber(ARGV[3])
local out
if ARGV[1] == 'ready' then
  out = {redis.call('LLEN', KEYS[1])}
  local vs = redis.call('LRANGE', KEYS[1], -(off + lim), -(off + 1))
  for i = #vs, 1, -1 do
    out[#out + 1] = vs[i]
    out[#out + 1] = 0
  end
else
  out = {redis.call('ZCARD', KEYS[2])}
  local rs = redis.call('ZRANGE', KEYS[2], off, off + lim - 1, 'WITHSCORES')
  local names = {}
  for i = 1, #rs, 2 do
    names[#names + 1] = rs[i]
  end
  if #names > 0 then
    local vs = redis.call('HMGET', KEYS[3], unpack(names))
    for i = 1, #vs do
      out[#out + 1] = vs[i] or ''
      out[#out + 1] = tonumber(rs[2 * i])
    end
  end
end
return out
