-- inspect_purge.lua: one bounded step of a purge of a queue's ready
-- messages (Inspector.PurgeReady): deletes up to ARGV[1] of those due to
-- be fetched next (the RPOP end) with one LTRIM. In-flight messages are
-- never purged (they are under a lease). A grouped job purged ends: the
-- next job of its group joins the back of ready (internal/groups), and a
-- later step may purge it.
--
-- KEYS[1] <prefix>:{<queue>}:ready  LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:wake   ZSET wake signal, set when a job joins ready
-- KEYS[3..6] the queue's group keys (internal/groups)
-- KEYS[7..12] the queue's limit keys (internal/limits): a job purged may
--          have been let in by a slot it had not taken yet, so the jobs
--          waiting for a limit with a free slot are let in (limit_pump)
-- ARGV[1] max messages to delete, 1..1000
-- Reply: {deleted, ready before this call}.
-- Bounded: ARGV[1] messages.

local held = redis.call('LLEN', KEYS[1])
local n = math.min(held, tonumber(ARGV[1]))
if n > 0 then
  local G = group_keys(3)
  local vs = {}
  if redis.call('EXISTS', G.jobs) == 1 then
    vs = redis.call('LRANGE', KEYS[1], -n, -1)
  end
  redis.call('LTRIM', KEYS[1], 0, -(n + 1))
  group_end_push(G, vs, KEYS[1], 'list', nil, KEYS[2])
  local let, admit = collect()
  limit_pump(limit_keys(7), admit)
  limit_push(KEYS[1], 'list', nil, KEYS[2], let)
end
return {n, held}
