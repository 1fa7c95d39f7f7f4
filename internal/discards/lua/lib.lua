-- lib.lua (internal/discards): helpers for every script that adds to, reads
-- or walks a queue's discard list. The Go side puts this text in front of
-- each such script (after internal/timers' lib.lua where a script needs
-- now_ms or bulk), so every script is still one self-contained EVAL of
-- fixed text; the helpers are locals, as Redis 7 forbids script globals.
-- It uses nothing but string patterns, so it runs on miniredis too.
--
-- A queue's discard list is a LIST of records, newest first (LPUSH):
--   d1,<unix ms>,<len(reason)>:<reason><stored message>
-- and the stored message is "1,<deliveries>,<attempt>,<recoveries>,
-- <len(id)>:<id><body>", the body starting with the kind as a uvarint
-- length and its bytes (internal/codec). Two counters go with it:
-- <prefix>:{<queue>}:dead_dropped counts the records the count cap trimmed,
-- <prefix>:{<queue>}:dead_expired those the age limit trimmed.
--
-- KEYS, ARGV, reply: none of its own; see each script.

-- DISCARD_AGE_STEP bounds the records one call drops for age.
local DISCARD_AGE_STEP = 100

-- discard_list names a queue's discard list, its two counters and its
-- retention: max records (>= 1) and max age in ms (<= 0: no age limit).
local function discard_list(dead, dropped, expired, max, maxage)
  return {dead = dead, dropped = dropped, expired = expired, max = tonumber(max), maxage = tonumber(maxage)}
end

-- discard_record builds the record of stored message m discarded at now
-- (unix ms) with reason.
local function discard_record(now, reason, m)
  return 'd1,' .. now .. ',' .. #reason .. ':' .. reason .. m
end

-- discard_time returns when record rec was made (unix ms), nil when it has
-- no readable time.
local function discard_time(rec)
  return tonumber(string.match(rec, '^d1,(%d+),'))
end

-- discard_expire drops the records older than now - maxage (ms) from the
-- oldest end of the list, at most DISCARD_AGE_STEP of them, counts them in
-- expired and returns how many it dropped. A record without a readable time
-- (not written by Conveyor) stops it: only the count cap drops that one.
local function discard_expire(dead, expired, maxage, now)
  maxage = tonumber(maxage)
  if maxage <= 0 then
    return 0
  end
  local cutoff = now - maxage
  local n = 0
  while n < DISCARD_AGE_STEP do
    local rec = redis.call('LINDEX', dead, -1)
    if not rec then
      break
    end
    local at = discard_time(rec)
    if not at or at >= cutoff then
      break
    end
    redis.call('RPOP', dead)
    n = n + 1
  end
  if n > 0 then
    redis.call('INCRBY', expired, n)
  end
  return n
end

-- discard_retain enforces dl's retention after records were added, n being
-- the list's length now: first the age limit, then the count cap, each
-- counted in its own counter.
local function discard_retain(dl, now, n)
  n = n - discard_expire(dl.dead, dl.expired, dl.maxage, now)
  if n > dl.max then
    redis.call('LTRIM', dl.dead, 0, dl.max - 1)
    redis.call('INCRBY', dl.dropped, n - dl.max)
  end
end

-- discard_push keeps stored message m in dl as discarded at now with
-- reason, and enforces the retention.
local function discard_push(dl, now, reason, m)
  discard_retain(dl, now, redis.call('LPUSH', dl.dead, discard_record(now, reason, m)))
end

-- discard_read reads record rec: the header of its stored message
-- (deliveries, attempt, recoveries, as decimal strings), the message ID, the
-- tail "<len(id)>:<id><body>" that a rewrite keeps, and the position in rec
-- where the body starts. nil when rec or its message header is unreadable.
local function discard_read(rec)
  local rl, p = string.match(rec, '^d1,%d+,(%d+):()')
  if not rl then
    return nil
  end
  local pos = p + tonumber(rl)
  -- The header is short: deliveries, attempt, recoveries and len(id) have
  -- at most 10 digits each.
  local d, a, r, tpos, il, ipos = string.match(string.sub(rec, pos, pos + 63), '^1,(%d+),(%d+),(%d+),()(%d+):()')
  if not d then
    return nil
  end
  local idlen = tonumber(il)
  ipos = pos + ipos - 1
  local id = string.sub(rec, ipos, ipos + idlen - 1)
  if #id ~= idlen then
    return nil
  end
  return d, a, r, id, string.sub(rec, pos + tpos - 1), ipos + idlen
end

-- discard_match reports whether record rec is selected by id ('' for any)
-- and kind ('' for any, else the kind as the body encodes it: its uvarint
-- length, then its bytes, so a match is exact).
local function discard_match(rec, id, kind)
  if id == '' and kind == '' then
    return true
  end
  local d, _, _, mid, _, body = discard_read(rec)
  if not d then
    return false
  end
  if id ~= '' and mid ~= id then
    return false
  end
  return kind == '' or string.sub(rec, body, body + #kind - 1) == kind
end
