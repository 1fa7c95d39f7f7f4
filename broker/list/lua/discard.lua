-- discard.lua: move one delivery to the queue's discard list with a reason,
-- keeping at most ARGV[4] records (the oldest are trimmed and counted).
-- Fenced like ack.lua.
--
-- KEYS[1] <prefix>:{<queue>}:inflight      HASH id -> stored message
-- KEYS[2] <prefix>:{<queue>}:lease         ZSET id, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[4] <prefix>:{<queue>}:dead_dropped  STRING count of records trimmed off the list
-- ARGV[1] id
-- ARGV[2] token (deliveries as a decimal string)
-- ARGV[3] reason
-- ARGV[4] max discard records kept, >= 1
-- Reply: "OK" or "LEASE_LOST".

local inflight, lease = KEYS[1], KEYS[2]
local id = ARGV[1]
local v = redis.call('HGET', inflight, id)
if not v or string.match(v, TOKEN) ~= ARGV[2] then
  return 'LEASE_LOST'
end
redis.call('HDEL', inflight, id)
redis.call('ZREM', lease, id)
discard(KEYS[3], KEYS[4], tonumber(ARGV[4]), now_ms(), ARGV[3], v)
return 'OK'
