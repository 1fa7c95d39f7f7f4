-- ack.lua: settle a batch of deliveries as done and forget them. Each
-- receipt is fenced: it settles only while it is still a member of the
-- lease ZSET, i.e. the lease was not reclaimed (a redelivery is another
-- member, with another token; see lib.lua). Its message leaves the inflight
-- HASH with it. A receipt that is no member is reported as reclaimed or as
-- gone (settled before), so that a caller who lost the reply to an earlier
-- settle knows whether it landed.
--
-- The acked messages are counted in the queue's stats HASH (field
-- processed): one HINCRBY per batch, for the Inspector's throughput.
--
-- KEYS[1] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[2] <prefix>:{<queue>}:inflight  HASH receipt -> stored message
-- KEYS[3] <prefix>:{<queue>}:stats     HASH processed, failed: cumulative counters
-- KEYS[4] <prefix>:{<queue>}:reclaimed ZSET receipt of a lease a reclaim took, score = when (unix ms); see lib.lua
-- KEYS[5] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[6] <prefix>:{<queue>}:wake      ZSET wake signal, set when a job joins ready
-- KEYS[7..12] the queue's limit keys (internal/limits): the deliveries'
--          slots are given back, letting waiting jobs in at the front of
--          ready (one EXISTS when no delivery holds a slot)
-- ARGV[k] for k >= 1: the receipt of delivery k
-- Reply: {k, status, ...} for each receipt k that did not settle: status
-- "LEASE_LOST" when a reclaim took its lease, "GONE" when none did (a
-- settle ended it, see lost_status); empty when all settled. KEYS[4] is
-- read only when some lease is gone.

local oks, _, lost = take(KEYS[1], KEYS[2], KEYS[4], ARGV)
if #oks > 0 then
  redis.call('HINCRBY', KEYS[3], 'processed', #oks)
  limit_release(limit_keys(7), KEYS[5], KEYS[6], oks)
end
return lost
