-- lib.lua (internal/records): helpers for every script that writes or
-- reads a queue's records of finished jobs. The Go side puts this text
-- after internal/timers' lib.lua (for now_ms), so every script is still one
-- self-contained EVAL of fixed text.
--
-- A queue's records are two keys and a counter HASH:
--   <prefix>:{<queue>}:done         HASH job ID -> "<finished ms>,<expires ms>,<JSON>"
--   <prefix>:{<queue>}:done_at      ZSET job ID, score = when its record expires (unix ms)
--   <prefix>:{<queue>}:done_counts  HASH expired, dropped: records retention removed
-- Each write sets the three keys to expire with the latest record (one
-- ZRANGE and a PEXPIRE each), so a queue that stops writing records is
-- left with none of them.
--
-- KEYS, ARGV, reply: none of its own; see each script.

-- RECORD_STEP bounds the records one call removes for retention.
local RECORD_STEP = 100

-- record_expire removes up to RECORD_STEP records whose time ran out by now
-- (unix ms), counts them as expired, and returns how many it removed.
local function record_expire(done, at, counts, now)
  local ids = redis.call('ZRANGE', at, '-inf', now, 'BYSCORE', 'LIMIT', 0, RECORD_STEP)
  if #ids > 0 then
    redis.call('ZREM', at, unpack(ids))
    redis.call('HDEL', done, unpack(ids))
    redis.call('HINCRBY', counts, 'expired', #ids)
  end
  return #ids
end

-- record_put writes the record of job id, finished now (unix ms), kept keep
-- ms, with data (its JSON), then enforces retention: records past their
-- time go, and while the queue holds more than max records the soonest to
-- expire go too (at most RECORD_STEP a call), counted as dropped.
local function record_put(done, at, counts, now, max, id, keep, data)
  keep = tonumber(keep)
  local exp = now + keep
  redis.call('HSET', done, id, now .. ',' .. exp .. ',' .. data)
  redis.call('ZADD', at, exp, id)
  record_expire(done, at, counts, now)
  local over = redis.call('ZCARD', at) - tonumber(max)
  if over > 0 then
    local popped = redis.call('ZPOPMIN', at, math.min(over, RECORD_STEP))
    local ids = {}
    for i = 1, #popped, 2 do
      ids[#ids + 1] = popped[i]
    end
    redis.call('HDEL', done, unpack(ids))
    redis.call('HINCRBY', counts, 'dropped', #ids)
  end
  -- The keys live as long as the latest record (which expires after now:
  -- neither step above removes it). The counters exist from the first
  -- record, so that they get its time too: a read that drops a record
  -- later only increments them.
  redis.call('HSETNX', counts, 'expired', 0)
  local last = tonumber(redis.call('ZRANGE', at, -1, -1, 'WITHSCORES')[2])
  for _, k in ipairs({done, at, counts}) do
    redis.call('PEXPIRE', k, last - now)
  end
end
