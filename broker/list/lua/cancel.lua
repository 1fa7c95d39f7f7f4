-- cancel.lua: look for a job by ID in one stretch of a queue's ready list
-- or in-flight HASH and cancel it there (Driver.CancelJob, through
-- internal/cancels, which calls it stretch after stretch with the cursor
-- each call returns). A ready message is removed (LREM of its exact stored
-- form, in this same call); an in-flight delivery is marked
-- (mark_canceled: its receipt in the marks ZSET, "<receipt>\n<id>"
-- published on the queue's cancel channel).
--
-- The ready list is walked by position from its newest end: pushes there
-- move the others further (a stretch may repeat some, never skip one), and
-- fetches pop from the other end. The in-flight HASH is walked with HSCAN,
-- which returns every field present for the whole walk at least once,
-- however leases move meanwhile.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:inflight  HASH receipt -> stored message
-- KEYS[3] <prefix>:{<queue>}:canceled  ZSET receipt of a cancelled delivery, score = when (unix ms)
-- KEYS[4] <prefix>:{<queue>}:wake      ZSET wake signal, deleted when ready empties
-- KEYS[5..8] the queue's group keys (internal/groups): a job waiting in its
--   group's line is removed from there (looked up first, in the first ready
--   stretch); a grouped job removed from ready lets the next one in
-- KEYS[9..14] the queue's limit keys (internal/limits): a job waiting in
--          a limit's line is removed from it (looked up first, with a
--          ready search's first step); a ready job removed lets the jobs
--          waiting for a limit with a free slot in (limit_pump)
-- ARGV[1] "ready" or "in_flight"
-- ARGV[2] job ID
-- ARGV[3] cursor: a position in ready, an HSCAN cursor in flight ("0" to start)
-- ARGV[4] messages to look at, 1..1000
-- ARGV[5] the queue's cancel channel
-- Reply: {found (1 or 0), cursor to go on from ("": the walk ends within
-- this stretch, or found)}.
-- Bounded: ARGV[4] messages (HSCAN's COUNT is a hint it keeps to within a
-- bucket's fields).

local id, n = ARGV[2], tonumber(ARGV[4])
-- A stored message's tail starts "<len(id)>:<id>"; a receipt is
-- "<token>,<len(id)>:<id>", its token without a ','.
local needle = #id .. ':' .. id

if ARGV[1] == 'ready' then
  local G = group_keys(5)
  local grouped = redis.call('EXISTS', G.jobs) == 1
  local off = tonumber(ARGV[3])
  if off == 0 and grouped and group_unwait(G, id) then
    return {1, ''}
  end
  if off == 0 then
    local v = limit_unwait(limit_keys(9), id)
    if v then
      if grouped then
        group_end_push(G, {v}, KEYS[1], 'list', nil, KEYS[4])
      end
      return {1, ''}
    end
  end
  local vs = redis.call('LRANGE', KEYS[1], off, off + n - 1)
  for i = 1, #vs do
    local pos = string.match(vs[i], '^1,%d+,%d+,%d+,()')
    if pos and string.sub(vs[i], pos, pos + #needle - 1) == needle then
      redis.call('LREM', KEYS[1], 1, vs[i])
      if grouped then
        group_end_push(G, {vs[i]}, KEYS[1], 'list', nil, KEYS[4])
      end
      -- It may have been let in by a slot it had not taken yet.
      local let, admit = collect()
      limit_pump(limit_keys(9), admit)
      limit_push(KEYS[1], 'list', nil, KEYS[4], let)
      if redis.call('LLEN', KEYS[1]) == 0 then
        redis.call('DEL', KEYS[4])
      end
      return {1, ''}
    end
  end
  if #vs < n then
    return {0, ''}
  end
  return {0, tostring(off + n)}
end

local r = redis.call('HSCAN', KEYS[2], ARGV[3], 'COUNT', n)
local kvs = r[2]
for i = 1, #kvs, 2 do
  local f = kvs[i]
  local comma = string.find(f, ',', 1, true)
  if comma and string.sub(f, comma + 1) == needle then
    mark_canceled(KEYS[3], ARGV[5], now_ms(), f, id)
    return {1, ''}
  end
end
if r[1] == '0' then
  return {0, ''}
end
return {0, r[1]}
