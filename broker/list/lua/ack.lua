-- ack.lua: settle a batch of deliveries as done and forget them. Each
-- (id, token) pair is fenced: it settles only while the in-flight entry's
-- deliveries equal the token, i.e. the lease was not reclaimed and handed to
-- someone else.
--
-- KEYS[1] <prefix>:{<queue>}:inflight  HASH id -> stored message
-- KEYS[2] <prefix>:{<queue>}:lease     ZSET id, score = lease deadline (unix ms)
-- ARGV[2k-1], ARGV[2k] for k >= 1: id, token (deliveries as a decimal string)
-- Reply: {k, status, ...} for each pair k that did not settle (status
-- "LEASE_LOST"); empty when all did.

local inflight, lease = KEYS[1], KEYS[2]
local okids, _, _, lost = settle_check(inflight, 1)
bulk('HDEL', inflight, okids)
bulk('ZREM', lease, okids)
return lost
