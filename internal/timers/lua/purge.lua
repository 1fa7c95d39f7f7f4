-- purge.lua: one bounded step of a purge of a queue's pending timers:
-- deletes up to ARGV[1] of them, earliest due first, body and all, in one
-- script so that no timer is left half deleted and none is promoted after
-- it was purged. A timer that was a grouped job's retry ends the job: the
-- next job of its group joins the queue (internal/groups).
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers   HASH timer ID -> stored message
-- KEYS[3..6] the queue's group keys (internal/groups)
-- KEYS[7], KEYS[8]: where a job goes when it joins the queue, as promote.lua's KEYS[3], KEYS[4]
-- ARGV[1] max timers to delete, 1..1000
-- ARGV[2], ARGV[3]: promote.lua's ARGV[2], ARGV[3] ("list" or "stream", group name)
-- Reply: {deleted, pending before this call}.
-- Bounded: ARGV[1] timers.

local delayed, timers = KEYS[1], KEYS[2]
local held = redis.call('ZCARD', delayed)
local ids = redis.call('ZRANGE', delayed, 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  local G = group_keys(3)
  local grouped = redis.call('EXISTS', G.jobs) == 1
  local jobs = {}
  if grouped then
    jobs = redis.call('HMGET', timers, unpack(ids))
  end
  redis.call('ZREM', delayed, unpack(ids))
  redis.call('HDEL', timers, unpack(ids))
  if grouped then
    group_end_push(G, jobs, KEYS[7], ARGV[2], ARGV[3], KEYS[8])
  end
end
return {#ids, held}
