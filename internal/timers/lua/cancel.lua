-- cancel.lua: remove a pending timer. ZREM is the test and the removal in
-- one command, and promote.lua removes a timer in one script too, so of a
-- cancel and a promotion exactly one finds the timer. A timer that was a
-- grouped job's retry ends the job: the next job of its group joins the
-- queue (internal/groups).
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers   HASH timer ID -> stored message
-- KEYS[3..6] the queue's group keys (internal/groups)
-- KEYS[7], KEYS[8]: where a job goes when it joins the queue, as promote.lua's KEYS[3], KEYS[4]
-- ARGV[1] timer ID
-- ARGV[2], ARGV[3]: promote.lua's ARGV[2], ARGV[3] ("list" or "stream", group name)
-- Reply: 1 when the timer was pending (and is now gone), else 0.

if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local v = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if v then
  group_end_push(group_keys(3), {v}, KEYS[7], ARGV[2], ARGV[3], KEYS[8])
end
return 1
