-- lib.lua (internal/cancels): the marks of cancelled in-flight deliveries,
-- shared by the list and stream drivers' scripts. It needs internal/timers'
-- lib.lua (bulk, keep_recent) in front of it.
--
-- The marks are a ZSET <prefix>:{<queue>}:canceled, member -> when the
-- cancel came (unix ms), one member per delivery: the list driver's
-- receipt, the stream driver's entry ID. A mark names one delivery, never a
-- job ID alone, so a later job under the same ID is not affected. Extend
-- reports a marked delivery as CANCELED (and still extends it: its holder
-- is alive and ends the job); a reclaim of a marked delivery's lease (its
-- holder died) removes the job instead of handing it back. Marks are kept
-- for CANCELED_AGE ms, at most CANCELED_MAX of them: the holder of a
-- cancelled job learns of it by its next heartbeat, and a dead holder's
-- lease runs out within its visibility timeout.
--
-- KEYS, ARGV, reply: none of its own; see each script.

local CANCELED_AGE = 86400000
local CANCELED_MAX = 100000

-- mark_canceled publishes "<member>\n<id>" on channel ch for the processes
-- that watch the queue (first: a user the ACL refuses the channel fails the
-- call with nothing written), marks delivery member as cancelled at now
-- (ms) in the marks key, keeping the time of the first cancel, and trims
-- the marks by age and count. It reports whether the delivery was marked
-- before. Neither a member nor an ID holds a control character.
local function mark_canceled(key, ch, now, member, id)
  redis.call('PUBLISH', ch, member .. '\n' .. id)
  local added = redis.call('ZADD', key, 'NX', now, member)
  keep_recent(key, now, CANCELED_AGE, CANCELED_MAX)
  return added == 0
end

-- canceled_among returns a table whose keys are the members of ms (a list)
-- marked in key. One EXISTS when no delivery of the queue is marked, the
-- usual case.
local function canceled_among(key, ms)
  local out = {}
  if #ms == 0 or redis.call('EXISTS', key) == 0 then
    return out
  end
  for i = 1, #ms, CHUNK do
    local hi = math.min(i + CHUNK - 1, #ms)
    local scores = redis.call('ZMSCORE', key, unpack(ms, i, hi))
    for j = i, hi do
      if scores[j - i + 1] then
        out[ms[j]] = true
      end
    end
  end
  return out
end
