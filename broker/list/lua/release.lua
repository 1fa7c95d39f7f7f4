-- release.lua: hand a batch of deliveries back to the FRONT of ready, in
-- their order, without counting an attempt or a recovery: for a worker that
-- stops before running them. Fenced like ack.lua. deliveries keeps its value
-- so that the released tokens never match again.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:inflight  HASH id -> stored message
-- KEYS[3] <prefix>:{<queue>}:lease     ZSET id, score = lease deadline (unix ms)
-- ARGV[2k-1], ARGV[2k] for k >= 1: id, token (deliveries as a decimal string)
-- Reply: {k, status, ...} for each pair k that was not released (status
-- "LEASE_LOST"); empty when all were.

local ready, inflight, lease = KEYS[1], KEYS[2], KEYS[3]
local okids, okvs, _, lost = settle_check(inflight, 1)
-- RPUSH the last first, so the first of the batch is fetched next.
local back = {}
for i = #okvs, 1, -1 do
  back[#back + 1] = okvs[i]
end
bulk('HDEL', inflight, okids)
bulk('ZREM', lease, okids)
bulk('RPUSH', ready, back)
return lost
