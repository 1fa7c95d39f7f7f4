-- reschedule.lua: move a pending timer to a new due time, waking the
-- promoters when it becomes the earliest. The stored message's own run-at
-- is not rewritten: the score is the truth (pending.lua reports it).
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- ARGV[1] timer ID
-- ARGV[2] the wait until the new due time, ms from the server's now (0: now)
-- Reply: 1 when the timer was pending (and moved), else 0.

local delayed = KEYS[1]
if not redis.call('ZSCORE', delayed, ARGV[1]) then
  return 0
end
-- A wait of 0 (now or past) is due at the server's now itself, not rounded
-- up: the next promotion takes it.
local wait = tonumber(ARGV[2])
local at = wait > 0 and due(now_ms_up(), wait) or tostring(now_ms())
timer_wake(delayed, timer_head(delayed), at) -- before the write (see timer_wake)
redis.call('ZADD', delayed, 'XX', at, ARGV[1])
return 1
