-- reschedule.lua: move a pending timer to a new due time, waking the
-- promoters when it becomes the earliest. The stored message's own run-at
-- is not rewritten: the score is the truth (pending.lua reports it).
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- ARGV[1] timer ID
-- ARGV[2] new due time, unix ms
-- Reply: 1 when the timer was pending (and moved), else 0.

local delayed = KEYS[1]
if not redis.call('ZSCORE', delayed, ARGV[1]) then
  return 0
end
timer_wake(delayed, timer_head(delayed), ARGV[2]) -- before the write (see timer_wake)
redis.call('ZADD', delayed, 'XX', ARGV[2], ARGV[1])
return 1
