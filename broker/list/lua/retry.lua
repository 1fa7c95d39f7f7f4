-- retry.lua: hand one delivery back to be run again at a time, counting a
-- failed attempt (attempt+1). Due now or earlier: the back of ready; later:
-- the delayed ZSET. Fenced like ack.lua.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:inflight  HASH id -> stored message
-- KEYS[3] <prefix>:{<queue>}:lease     ZSET id, score = lease deadline (unix ms)
-- KEYS[4] <prefix>:{<queue>}:delayed   ZSET stored message, score = run-at (unix ms)
-- ARGV[1] id
-- ARGV[2] token (deliveries as a decimal string)
-- ARGV[3] run-at, unix ms
-- Reply: "OK" or "LEASE_LOST".

local ready, inflight, lease, delayed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, at = ARGV[1], tonumber(ARGV[3])
local v = redis.call('HGET', inflight, id)
local d, a, r, _, tail
if v then
  d, a, r, _, tail = parse(v)
end
if not d or d ~= ARGV[2] then
  return 'LEASE_LOST'
end
redis.call('HDEL', inflight, id)
redis.call('ZREM', lease, id)
v = build(d, tonumber(a) + 1, r, tail)
if at > now_ms() then
  redis.call('ZADD', delayed, at, v)
else
  redis.call('LPUSH', ready, v)
end
return 'OK'
