-- transition.lua: move an order from one state to another, only if it is in
-- the expected state, and give its stock back when it is cancelled. The
-- atomic compare-and-set is what gives the payment-versus-timeout race
-- exactly one winner.
--
-- KEYS[1]  <ns>:order:<id>   HASH with fields state, item
-- KEYS[2]  <ns>:stock        HASH item -> units left
-- ARGV[1]  expected state (e.g. "unpaid")
-- ARGV[2]  new state ("paid" or "cancelled")
--
-- Reply: 1 when this call made the transition, 0 when the order was not in
-- the expected state (someone else won).
if redis.call('HGET', KEYS[1], 'state') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
if ARGV[2] == 'cancelled' then
  redis.call('HINCRBY', KEYS[2], redis.call('HGET', KEYS[1], 'item'), 1)
end
return 1
