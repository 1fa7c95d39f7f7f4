-- discard.lua: move one delivery to the queue's discard list with a reason,
-- keeping at most ARGV[4] records, none older than ARGV[5] (the oldest are
-- trimmed and counted, see internal/discards' lib.lua). Fenced like ack.lua.
-- A discard ends a failed handler run: the queue's stats HASH counts it
-- (field failed). Poison discards (fetch.lua, reap.lua) are crash
-- recoveries, not failures, and are not counted.
--
-- KEYS[1] <prefix>:{<queue>}:lease         ZSET stored message in flight, score = lease deadline (unix ms)
-- KEYS[2] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[3] <prefix>:{<queue>}:dead_dropped  STRING count of records the count cap trimmed
-- KEYS[4] <prefix>:{<queue>}:dead_expired  STRING count of records the age limit trimmed
-- KEYS[5] <prefix>:{<queue>}:stats         HASH processed, failed: cumulative counters
-- ARGV[1] stored message (the delivery's receipt)
-- ARGV[2] token (deliveries as a decimal string)
-- ARGV[3] reason
-- ARGV[4] max discard records kept, >= 1
-- ARGV[5] max age of discard records, ms (<= 0: no age limit)
-- Reply: "OK" or "LEASE_LOST".

local v = ARGV[1]
-- ZREM is the lease check: it removes the member only if it is still there.
if string.match(v, TOKEN) ~= ARGV[2] or redis.call('ZREM', KEYS[1], v) == 0 then
  return 'LEASE_LOST'
end
discard(discard_list(KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[5]), now_ms(), ARGV[3], v)
redis.call('HINCRBY', KEYS[5], 'failed', 1)
return 'OK'
