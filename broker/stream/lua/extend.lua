-- extend.lua: extend the leases of a batch of deliveries (stream driver).
--
-- A stream lease is the PEL entry's idle time: an entry is taken over once it
-- has been idle longer than the visibility timeout. Each delivery is fenced as
-- in ack.lua, then XCLAIMed to this same consumer with IDLE ARGV[3], which
-- sets its idle time so that it expires ttl from now, and RETRYCOUNT set to
-- the current count so the token stays valid (JUSTID alone keeps the count on
-- Redis but not on miniredis).
--
-- A delivery whose job was cancelled (its entry ID is in the marks ZSET,
-- see internal/cancels and cancel.lua) is extended too, its holder being
-- alive to end the job, and reported CANCELED so that the holder stops its
-- handler. One EXISTS when no delivery of the queue is marked.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:canceled ZSET entry ID of a cancelled delivery (internal/cancels)
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  idle time to set (ms): visibility timeout - ttl, at least 0
-- ARGV[4], ARGV[5], ...  pairs: entry ID, delivery count (the count part of the token)
--
-- Reply: one status per pair, in order: "OK", "CANCELED" (extended, and
-- its job cancelled) or "LEASE_LOST".
-- Bounded: one iteration per pair; the caller sends at most 512 pairs,
-- then one ZMSCORE of them when the marks ZSET exists.
local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local out = {}

if redis.call('EXISTS', stream) == 0 then
  for i = 4, #ARGV, 2 do
    out[#out + 1] = 'LEASE_LOST'
  end
  return out
end

-- extended holds the IDs of the entries extended, at holds their statuses'
-- positions in out.
local extended, at = {}, {}
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
  if p and p[2] == me and p[4] == tonumber(ARGV[i + 1]) then
    redis.call('XCLAIM', stream, group, me, 0, id, 'IDLE', ARGV[3], 'RETRYCOUNT', p[4], 'JUSTID')
    out[#out + 1] = 'OK'
    extended[#extended + 1] = id
    at[#at + 1] = #out
  else
    out[#out + 1] = 'LEASE_LOST'
  end
end
local marked = canceled_among(KEYS[2], extended)
for j, id in ipairs(extended) do
  if marked[id] then
    out[at[j]] = 'CANCELED'
  end
end
return out
