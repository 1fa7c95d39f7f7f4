-- inspect_find.lua: look for a message by ID in one stretch of a queue's
-- ready list or lease ZSET (Inspector.FindJob). The Go side walks the
-- structure from position 0 on, one stretch per call. The ready list is
-- walked from its newest end (LPUSH side): messages pushed meanwhile move
-- the others further, so a stretch may repeat some, never skip one for
-- that; fetches pop from the other end.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:inflight  HASH receipt -> stored message
-- ARGV[1] "ready" or "in_flight"
-- ARGV[2] message ID
-- ARGV[3] position to start at, >= 0
-- ARGV[4] messages to look at, 1..1000
-- Reply: {stored message found or "", its lease deadline (unix ms; 0 when
-- ready or not found), position to go on from (-1: the structure ends
-- within this stretch)}.
-- Bounded: ARGV[4] messages.

local id, off, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
-- A stored message's tail starts "<len(id)>:<id>": comparing that much
-- matches the ID exactly.
local needle = #id .. ':' .. id
local function is(v)
  local pos = string.match(v, '^1,%d+,%d+,%d+,()')
  return pos and string.sub(v, pos, pos + #needle - 1) == needle
end
-- A receipt ends in the same "<len(id)>:<id>", after its token's ','.
local function names(r)
  return string.sub(r, -#needle - 1) == ',' .. needle
end

local seen
if ARGV[1] == 'ready' then
  local vs = redis.call('LRANGE', KEYS[1], off, off + n - 1)
  for i = 1, #vs do
    if is(vs[i]) then
      return {vs[i], 0, -1}
    end
  end
  seen = #vs
else
  local vs = redis.call('ZRANGE', KEYS[2], off, off + n - 1, 'WITHSCORES')
  for i = 1, #vs, 2 do
    if names(vs[i]) then
      local v = redis.call('HGET', KEYS[3], vs[i])
      if v then
        return {v, tonumber(vs[i + 1]), -1}
      end
    end
  end
  seen = #vs / 2
end
if seen < n then
  return {'', 0, -1}
end
return {'', 0, off + n}
