-- reap.lua: one bounded step of crash recovery for one queue.
-- (1) Requeues up to ARGV[3] messages whose lease ran out. (2) Scans the
-- in-flight HASH from cursor ARGV[1] (HSCAN COUNT ARGV[2]) and requeues
-- entries that have no lease at all: a lease lost to eviction or a failover
-- would otherwise leave them in flight forever (asynq #1144). Both go to the
-- FRONT of ready with recoveries+1. fetch.lua writes an in-flight entry and
-- its lease in one script, so an entry without a lease is never one that is
-- being leased right now.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:inflight  HASH id -> stored message
-- KEYS[3] <prefix>:{<queue>}:lease     ZSET id, score = lease deadline (unix ms)
-- ARGV[1] HSCAN cursor ("0" starts a pass)
-- ARGV[2] HSCAN COUNT hint
-- ARGV[3] max expired leases to reclaim
-- Reply: {next cursor ("0": pass done), expired requeued, lease-less requeued}

local ready, inflight, lease = KEYS[1], KEYS[2], KEYS[3]
local expired = reclaim(ready, inflight, lease, now_ms(), tonumber(ARGV[3]))

local res = redis.call('HSCAN', inflight, ARGV[1], 'COUNT', tonumber(ARGV[2]))
local kv = res[2]
local ids, vs = {}, {}
for i = 1, #kv, 2 do
  if not redis.call('ZSCORE', lease, kv[i]) then
    ids[#ids + 1] = kv[i]
    vs[#vs + 1] = kv[i + 1]
  end
end
return {res[1], expired, requeue(ready, inflight, ids, vs)}
