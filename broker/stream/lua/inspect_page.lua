-- inspect_page.lua: one page of a queue's ready or in-flight entries
-- (Inspector.ListJobs), both oldest entry first (ready: the order they are
-- fetched in). A stream has no index by position, so reaching an offset
-- means reading past the entries before it: each call skips at most
-- 10 x 1,000 of them and, when more remain to skip, returns a cursor for the
-- Go side to call again with. Ready entries are read with XRANGE after the
-- group's last-delivered-id, in-flight ones with XPENDING (the entry's
-- consumer, idle time and delivery count) and an XRANGE of each.
--
-- KEYS[1] <prefix>:{<queue>}:stream  STREAM with the consumer group ARGV[1]
-- ARGV[1] consumer group name
-- ARGV[2] "ready" or "in_flight"
-- ARGV[3] cursor: the entry ID to go on after, "" to start
-- ARGV[4] entries still to skip, >= 0
-- ARGV[5] limit, 1..1000
-- Reply: {total in the state, server time (unix ms), cursor, still to
-- skip}: when still to skip is above 0, call again with the cursor; else
-- five items per entry follow: entry ID, consumer ("" when ready), idle
-- time (ms; -1 when ready), delivery count (0 when ready), stored message
-- ("" when the entry is gone or has no field "m").
-- Bounded: 10 skip steps of 1,000, then ARGV[5] entries.

local stream, group, mode = KEYS[1], ARGV[1], ARGV[2]
local cursor, skip, lim = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local STEP, STEPS = 1000, 10
local now = now_ms()
local last = last_delivered(stream, group)
if not last then
  return {0, now, '', 0}
end
local pending = pending_count(stream, group)

-- skip_past reads past k entries after cursor c, at most STEPS x STEP of
-- them, with read(start, count) (entries or pending entries, each ID
-- first), and returns the cursor it reached and how many are still to skip.
local function skip_past(c, k, read)
  for _ = 1, STEPS do
    if k <= 0 then
      break
    end
    local r = read(after_cursor(c), math.min(k, STEP))
    if #r == 0 then
      return c, 0
    end
    c = r[#r][1]
    k = k - #r
  end
  return c, k
end

if mode == 'ready' then
  local total = math.max(0, redis.call('XLEN', stream) - pending)
  if cursor == '' then
    cursor = last
  end
  cursor, skip = skip_past(cursor, skip, function(start, n)
    return redis.call('XRANGE', stream, start, '+', 'COUNT', n)
  end)
  if skip > 0 then
    return {total, now, cursor, skip}
  end
  local out = {total, now, '', 0}
  for _, e in ipairs(redis.call('XRANGE', stream, after_cursor(cursor), '+', 'COUNT', lim)) do
    out[#out + 1] = e[1]
    out[#out + 1] = ''
    out[#out + 1] = -1
    out[#out + 1] = 0
    out[#out + 1] = entry_body(e[2])
  end
  return out
end

if pending == 0 then
  return {0, now, '', 0}
end
cursor, skip = skip_past(cursor, skip, function(start, n)
  return redis.call('XPENDING', stream, group, start, '+', n)
end)
if skip > 0 then
  return {pending, now, cursor, skip}
end
local out = {pending, now, '', 0}
for _, p in ipairs(redis.call('XPENDING', stream, group, after_cursor(cursor), '+', lim)) do
  local e = redis.call('XRANGE', stream, p[1], p[1])[1]
  out[#out + 1] = p[1]
  out[#out + 1] = p[2]
  out[#out + 1] = p[3]
  out[#out + 1] = p[4]
  out[#out + 1] = e and entry_body(e[2]) or ''
end
return out
