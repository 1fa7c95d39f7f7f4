-- ack.lua: settle a batch of deliveries as done (stream driver).
--
-- Each delivery is fenced: its entry must be pending in the group, owned by
-- this consumer, with the delivery count the consumer was handed (XACK alone
-- checks neither owner nor count). Acked entries are XACKed and XDELed (the
-- driver never trims, so deleting acked entries is what bounds the stream).
-- When the stream is then empty and nothing is pending, the stream key (and
-- with it the group) is deleted; enqueue.lua recreates both.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3], ARGV[4], ...  pairs: entry ID, delivery count (the count part of the token)
--
-- Reply: one status per pair, in order: "OK" or "LEASE_LOST".
-- Bounded: one iteration per pair; the caller sends at most 512 pairs.
local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local out = {}

if redis.call('EXISTS', stream) == 0 then
  for i = 3, #ARGV, 2 do
    out[#out + 1] = 'LEASE_LOST'
  end
  return out
end

local ids = {}
for i = 3, #ARGV, 2 do
  local p = redis.call('XPENDING', stream, group, ARGV[i], ARGV[i], 1)[1]
  if p and p[2] == me and p[4] == tonumber(ARGV[i + 1]) then
    ids[#ids + 1] = ARGV[i]
    out[#out + 1] = 'OK'
  else
    out[#out + 1] = 'LEASE_LOST'
  end
end

if #ids > 0 then
  redis.call('XACK', stream, group, unpack(ids))
  redis.call('XDEL', stream, unpack(ids))
  if redis.call('XLEN', stream) == 0 and redis.call('XPENDING', stream, group)[1] == 0 then
    redis.call('DEL', stream)
  end
end
return out
