-- return_stock.lua: give a cancelled order's unit of stock back, once. The
-- order remembers that it did (field stock_returned), so the timeout job
-- may run this again after a failure, a retry or a re-drive without
-- returning the unit twice.
--
-- KEYS[1]  <ns>:order:<id>   HASH with fields state, item, stock_returned
-- KEYS[2]  <ns>:stock        HASH item -> units left
--
-- Reply: 1 when this call returned the unit, 0 when an earlier call did,
-- -1 when the order is not cancelled (nothing to give back).
if redis.call('HGET', KEYS[1], 'state') ~= 'cancelled' then
  return -1
end
if redis.call('HSETNX', KEYS[1], 'stock_returned', '1') == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[2], redis.call('HGET', KEYS[1], 'item'), 1)
return 1
