-- cancel.lua: remove a pending timer. ZREM is the test and the removal in
-- one command, and promote.lua removes a timer in one script too, so of a
-- cancel and a promotion exactly one finds the timer.
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers   HASH timer ID -> stored message
-- ARGV[1] timer ID
-- Reply: 1 when the timer was pending (and is now gone), else 0.

if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
