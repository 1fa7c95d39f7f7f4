-- extend.lua: push the lease deadline of a batch of deliveries to now + ttl.
-- Fenced like ack.lua. A matching delivery whose lease entry is missing
-- (lost to eviction or a failover) gets it back: its holder is alive.
--
-- KEYS[1] <prefix>:{<queue>}:inflight  HASH id -> stored message
-- KEYS[2] <prefix>:{<queue>}:lease     ZSET id, score = lease deadline (unix ms)
-- ARGV[1] ttl, ms
-- ARGV[2k], ARGV[2k+1] for k >= 1: id, token (deliveries as a decimal string)
-- Reply: {deadline (unix ms), k, status, ...}: the new deadline, then each
-- pair k that was not extended (status "LEASE_LOST").

local inflight, lease = KEYS[1], KEYS[2]
local deadline = now_ms() + tonumber(ARGV[1])
local okids, _, _, lost = settle_check(inflight, 2)
local zadd = {}
for i = 1, #okids do
  zadd[#zadd + 1] = deadline
  zadd[#zadd + 1] = okids[i]
end
bulk('ZADD', lease, zadd)
local out = {deadline}
for i = 1, #lost do
  out[#out + 1] = lost[i]
end
return out
