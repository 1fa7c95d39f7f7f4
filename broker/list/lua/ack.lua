-- ack.lua: settle a batch of deliveries as done and forget them. Each
-- receipt is fenced: it settles only while the receipt, which is the stored
-- message of that very delivery (its deliveries field the delivery's token),
-- is still a member of the lease ZSET, i.e. the lease was not reclaimed (a
-- redelivery is another member, with a higher count).
--
-- The acked messages are counted in the queue's stats HASH (field
-- processed): one HINCRBY per batch, for the Inspector's throughput.
--
-- KEYS[1] <prefix>:{<queue>}:lease  ZSET stored message in flight, score = lease deadline (unix ms)
-- KEYS[2] <prefix>:{<queue>}:stats  HASH processed, failed: cumulative counters
-- ARGV[k] for k >= 1: stored message (the delivery's receipt)
-- Reply: {k, status, ...} for each receipt k that did not settle (status
-- "LEASE_LOST"); empty when all did.

local oks, lost = take(KEYS[1], 1)
if #oks > 0 then
  redis.call('HINCRBY', KEYS[2], 'processed', #oks)
end
return lost
