-- buy.lua: the flash sale's gate. In one atomic step it refuses a buyer who
-- already has an order in the sale, refuses when the stock is gone, or else
-- enqueues the order job on the queue's stream, takes one unit and records
-- the buyer and the order. A refused buyer writes nothing; a unit is never
-- taken without its order job being in the queue.
--
-- The job is added as the stream driver's contract for an application's own
-- script says (broker/stream/external.go): the consumer group is created
-- with the stream, from ID 0, when the stream is missing; the entry's field
-- "m" holds the stored job. It is added before the stock moves: if the XADD
-- fails, the script stops before it has taken anything.
--
-- KEYS[1]  <prefix>:{<queue>}:app:sale:<sale>:stock   STRING units left;
--          missing while the sale is not open
-- KEYS[2]  <prefix>:{<queue>}:app:sale:<sale>:buyers  HASH user ID -> order ID
-- KEYS[3]  <prefix>:{<queue>}:app:order:<order>       HASH state ("unpaid"),
--          user, sale
-- KEYS[4]  <prefix>:{<queue>}:stream                  the queue's STREAM
--          (stream.Driver.PrepareAdd: StreamKey)
-- KEYS[5]  <prefix>:{<queue>}:wake                    the queue's wake signal, a ZSET:
--          adding its member wakes one sleeping worker pool (PrepareAdd: SignalKey)
-- ARGV[1]  user ID
-- ARGV[2]  order ID
-- ARGV[3]  sale ID
-- ARGV[4]  consumer group (PrepareAdd: Group)
-- ARGV[5]  the order job in its stored form (PrepareAdd: Stored)
--
-- Reply: {0, units left after this order} placed; {1, 0} sold out;
-- {2, order ID} the user already holds that order; {3, 0} sale not open.
local stock, buyers, order, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user = ARGV[1]

local held = redis.call('HGET', buyers, user)
if held then
  return {2, held}
end
local left = redis.call('GET', stock)
if not left then
  return {3, 0}
end
if tonumber(left) <= 0 then
  return {1, 0}
end

if redis.call('EXISTS', stream) == 0 then
  redis.call('XGROUP', 'CREATE', stream, ARGV[4], '0', 'MKSTREAM')
end
redis.call('XADD', stream, '*', 'm', ARGV[5])
redis.call('ZADD', KEYS[5], 0, 'w')
left = redis.call('DECR', stock)
redis.call('HSET', buyers, user, ARGV[2])
redis.call('HSET', order, 'state', 'unpaid', 'user', user, 'sale', ARGV[3])
return {0, left}
