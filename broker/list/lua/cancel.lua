-- cancel.lua: look for a job by ID in one stretch of a queue's ready list
-- or lease ZSET and cancel it there (Driver.CancelJob, through
-- internal/cancels, which walks the states from position 0 on, one stretch
-- per call, as inspect_find.lua does). A ready message is removed (LREM of
-- its exact stored form, in this same call); an in-flight delivery is
-- marked (mark_canceled: its receipt in the marks ZSET, its ID published on
-- the queue's cancel channel).
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:inflight  HASH receipt -> stored message
-- KEYS[4] <prefix>:{<queue>}:canceled  ZSET receipt of a cancelled delivery, score = when (unix ms)
-- KEYS[5] <prefix>:{<queue>}:wake      ZSET wake signal, deleted when ready empties
-- ARGV[1] "ready" or "in_flight"
-- ARGV[2] job ID
-- ARGV[3] position to start at, >= 0
-- ARGV[4] messages to look at, 1..1000
-- ARGV[5] the queue's cancel channel
-- Reply: {found (1 or 0), position to go on from (-1: the structure ends
-- within this stretch, or found)}.
-- Bounded: ARGV[4] messages.

local id, off, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
-- A stored message's tail starts "<len(id)>:<id>", and a receipt ends in
-- ",<len(id)>:<id>": comparing that much matches the ID exactly.
local needle = #id .. ':' .. id

local seen
if ARGV[1] == 'ready' then
  local vs = redis.call('LRANGE', KEYS[1], off, off + n - 1)
  for i = 1, #vs do
    local pos = string.match(vs[i], '^1,%d+,%d+,%d+,()')
    if pos and string.sub(vs[i], pos, pos + #needle - 1) == needle then
      redis.call('LREM', KEYS[1], 1, vs[i])
      if redis.call('LLEN', KEYS[1]) == 0 then
        redis.call('DEL', KEYS[5])
      end
      return {1, -1}
    end
  end
  seen = #vs
else
  local rs = redis.call('ZRANGE', KEYS[2], off, off + n - 1)
  for i = 1, #rs do
    local r = rs[i]
    if string.sub(r, -#needle - 1) == ',' .. needle and redis.call('HEXISTS', KEYS[3], r) == 1 then
      mark_canceled(KEYS[4], ARGV[5], now_ms(), r, id)
      return {1, -1}
    end
  end
  seen = #rs
end
if seen < n then
  return {0, -1}
end
return {0, off + n}
