-- transition.lua: move an order from one state to another, only if it is in
-- the expected state. This compare-and-set is what gives the race between
-- a payment and the payment timer exactly one winner: both try to move the
-- order out of "unpaid", and only the first finds it there.
--
-- KEYS[1]  <ns>:order:<id>   HASH with fields state, item
-- ARGV[1]  expected state ("unpaid")
-- ARGV[2]  new state ("paid" or "cancelled")
--
-- Reply: {moved, state}: moved is 1 when this call made the transition and
-- 0 when the order was not in the expected state (someone else won); state
-- is the order's state after the call ("" for an unknown order).
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= ARGV[1] then
  return {0, state or ''}
end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
return {1, ARGV[2]}
