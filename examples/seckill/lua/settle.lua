-- settle.lua: move an order out of "unpaid", to "paid" (the buyer paid) or
-- "cancelled" (its payment timer fired, or the database refused it), only if
-- it is still unpaid, and give its unit back to the stock when it is
-- cancelled. The compare-and-set is what gives the race between payment and
-- timeout exactly one winner: the loser finds the order settled and does
-- nothing.
--
-- A unit goes back only to a sale whose stock key exists: INCR on a missing
-- key would create it at 1 and so open a sale that was never opened, or
-- that was closed. The units given back are counted in the same step, so
-- that the load report's "placed = items + given back - left" is exact.
--
-- KEYS[1]  <prefix>:{<queue>}:app:order:<order>       HASH state, user, sale
-- KEYS[2]  <prefix>:{<queue>}:app:sale:<sale>:stock   STRING units left
-- KEYS[3]  <prefix>:{<queue>}:app:sale:<sale>:stats   HASH counters; field
--          "returned": units given back
-- ARGV[1]  new state: "paid" or "cancelled"
-- ARGV[2]  how long the settled order's HASH is kept, ms (0: no expiry)
--
-- Reply: 1 when this call moved the order; 0 when it was not unpaid (the
-- other side won, or the order is unknown).
local order, stock, stats = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', order, 'state') ~= 'unpaid' then
  return 0
end
redis.call('HSET', order, 'state', ARGV[1])
if ARGV[1] == 'cancelled' and redis.call('EXISTS', stock) == 1 then
  redis.call('INCR', stock)
  redis.call('HINCRBY', stats, 'returned', 1)
end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', order, ARGV[2])
end
return 1
