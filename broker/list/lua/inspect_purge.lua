-- inspect_purge.lua: one bounded step of a purge of a queue's ready
-- messages (Inspector.PurgeReady): deletes up to ARGV[1] of those due to
-- be fetched next (the RPOP end) with one LTRIM, which returns nothing to
-- the caller. In-flight messages are never purged (they are under a
-- lease).
--
-- KEYS[1] <prefix>:{<queue>}:ready  LIST of stored messages
-- ARGV[1] max messages to delete, 1..1000
-- Reply: {deleted, ready before this call}.
-- Bounded: ARGV[1] messages.

local held = redis.call('LLEN', KEYS[1])
local n = math.min(held, tonumber(ARGV[1]))
if n > 0 then
  redis.call('LTRIM', KEYS[1], 0, -(n + 1))
end
return {n, held}
