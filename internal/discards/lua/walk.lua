-- walk.lua: one page of a re-drive or a purge of a queue's discard list.
-- The Go side walks the list from its oldest record towards the newest, one
-- page per call, until it reaches the records made after the walk began.
-- Each page looks at up to ARGV[7] records and acts on up to ARGV[6] of
-- those ARGV[4] and ARGV[5] select: a re-drive pushes each one's message
-- to the ready structure, attempt and recoveries reset to 0, oldest first;
-- a purge deletes it. Records it acts on leave the list; the others stay
-- in place, and the newest of them is the cursor the next page starts
-- after (found again with LPOS, so records added, trimmed or removed in
-- between cannot make the walk skip one: when the cursor is gone the walk
-- starts again from the oldest record, and a record it looked at stays
-- unselected).
--
-- The list driver's messages carry their next delivery's count (the
-- fencing token, see broker/list's lib.lua): a re-drive adds one to it, so
-- the re-driven message is a string no earlier delivery had. The stream
-- driver's entries are fenced by entry ID: its messages are pushed as they
-- were, counters reset.
--
-- KEYS[1] <prefix>:{<queue>}:dead    LIST of discard records, newest first
-- KEYS[2] <prefix>:{<queue>}:ready   LIST (ARGV[2] "list": LPUSH, the back of the queue)
--      or <prefix>:{<queue>}:stream  STREAM (ARGV[2] "stream": XADD field "m"; the
--                                    stream and group ARGV[3] are created when missing)
-- KEYS[3] <prefix>:{<queue>}:wake    optional: ZSET wake signal, its member added when a
--                                    re-drive pushed messages (internal/wake)
-- ARGV[1] "redrive" or "purge" (a purge does not touch KEYS[2])
-- ARGV[2] "list" or "stream"
-- ARGV[3] consumer group name (stream only)
-- ARGV[4] message ID to select, "" for any
-- ARGV[5] kind to select, as the message body encodes it (uvarint length,
--         bytes), "" for any
-- ARGV[6] max records to act on, >= 1
-- ARGV[7] max records to look at, >= 1
-- ARGV[8] the walk's start (unix ms): records made at or after it end the
--         walk; 0 on the first page: now + 1
-- ARGV[9] cursor: the record the previous page stopped after, "" to start
--         at the oldest
-- Reply: {acted on, done (1: the walk reached its end), start (ARGV[8] as
-- used), cursor for the next page}.
-- Bounded: ARGV[7] records looked at, ARGV[6] acted on.

local dead, target = KEYS[1], KEYS[2]
local mode, into, group = ARGV[1], ARGV[2], ARGV[3]
local id, kind = ARGV[4], ARGV[5]
local most, scan = tonumber(ARGV[6]), tonumber(ARGV[7])
local start = tonumber(ARGV[8])
if start <= 0 then
  start = now_ms() + 1
end
local cursor = ARGV[9]

-- hi: the oldest record not looked at yet (positions count from the newest).
local hi = redis.call('LLEN', dead) - 1
if cursor ~= '' then
  local at = redis.call('LPOS', dead, cursor, 'RANK', -1)
  if at then
    hi = at - 1
  end
end
if hi < 0 then
  return {0, 1, start, cursor}
end
local lo = math.max(0, hi - scan + 1)
local recs = redis.call('LRANGE', dead, lo, hi)

-- redriven returns the message of record rec as re-driven, nil when its
-- header is unreadable.
local function redriven(rec)
  local d, _, _, _, tail = discard_read(rec)
  if not d then
    return nil
  end
  if into == 'list' then
    d = tonumber(d) + 1
  end
  return '1,' .. d .. ',0,0,' .. tail
end

local done = 0
local hits, msgs = {}, {}
local i = #recs
while i >= 1 and #hits < most do
  local rec = recs[i]
  local at = discard_time(rec)
  if at and at >= start then
    done = 1
    break
  end
  local m = nil
  if discard_match(rec, id, kind) then
    if mode == 'purge' then
      m = true
    else
      m = redriven(rec)
    end
  end
  if m then
    hits[#hits + 1] = lo + i - 1
    msgs[#msgs + 1] = m
  else
    cursor = rec
  end
  i = i - 1
end
if i == 0 and lo == 0 then
  done = 1
end

if #hits > 0 then
  -- Mark the records acted on, then remove the marks: LREM from the oldest
  -- end stops at the last mark. The mark is no record (records start "d1,").
  local mark = 'conveyor:walked'
  for j = 1, #hits do
    redis.call('LSET', dead, hits[j], mark)
  end
  redis.call('LREM', dead, -#hits, mark)
  if mode == 'redrive' then
    if into == 'stream' then
      if redis.call('EXISTS', target) == 0 then
        redis.call('XGROUP', 'CREATE', target, group, '0', 'MKSTREAM')
      end
      for j = 1, #msgs do
        redis.call('XADD', target, '*', 'm', msgs[j])
      end
    else
      bulk('LPUSH', target, msgs)
    end
    if KEYS[3] and #msgs > 0 then
      redis.call('ZADD', KEYS[3], 0, 'w')
    end
  end
end
return {#hits, done, start, cursor}
