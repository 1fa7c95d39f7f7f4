-- inspect_find.lua: look for a message by ID in one stretch of a queue's
-- ready or in-flight entries (Inspector.FindJob). The Go side walks the
-- state's part of the stream (inspect_lib.lua) oldest entry first, one
-- stretch per call, passing back the last entry ID it saw.
--
-- KEYS[1] <prefix>:{<queue>}:stream  STREAM with the consumer group ARGV[1]
-- ARGV[1] consumer group name
-- ARGV[2] "ready" or "in_flight"
-- ARGV[3] message ID
-- ARGV[4] cursor: the entry ID to go on after, "" to start
-- ARGV[5] entries to look at, 1..1000
-- Reply: {1, server time (unix ms), entry ID, consumer, idle time (ms),
-- delivery count, stored message} when found (consumer "", idle -1, count
-- 0 for a ready entry); else {0, server time, cursor to go on after ("":
-- the state's entries end within this stretch)}.
-- Bounded: ARGV[5] entries.

local stream, group, mode, id = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local cursor, n = ARGV[4], tonumber(ARGV[5])
local now = now_ms()
local last = last_delivered(stream, group)
if not last then
  return {0, now, ''}
end
local r = stretch(stream, mode, cursor, last, n)
if not r then
  return {0, now, ''}
end
for _, e in ipairs(r) do
  local m = entry_body(e[2])
  if is_job(m, id) then
    if mode == 'ready' then
      return {1, now, e[1], '', -1, 0, m}
    end
    local p = redis.call('XPENDING', stream, group, e[1], e[1], 1)[1]
    if p then
      return {1, now, e[1], p[2], p[3], p[4], m}
    end
  end
end
if #r < n then
  return {0, now, ''}
end
return {0, now, r[#r][1]}
