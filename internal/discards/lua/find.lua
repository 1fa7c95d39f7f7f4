-- find.lua: look for the newest record of one message ID in a stretch of a
-- queue's discard list, after a step of age retention. The Go side walks the
-- list from the newest record, one stretch per call. Records added while it
-- walks push the others further: a stretch may repeat records, never skip
-- one for that.
--
-- KEYS[1] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[2] <prefix>:{<queue>}:dead_expired  STRING count of records dropped for age
-- ARGV[1] max age, ms (<= 0: no age limit)
-- ARGV[2] message ID
-- ARGV[3] position to start at, >= 0
-- ARGV[4] records to look at, 1..1000
-- Reply: {dropped for age by this call, found record or "", position to go
-- on from (-1: the list ends within this stretch)}.
-- Bounded: ARGV[4] records, 100 dropped.

local dead = KEYS[1]
local expired = discard_expire(dead, KEYS[2], ARGV[1], now_ms())
local id, off, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local recs = redis.call('LRANGE', dead, off, off + n - 1)
for i = 1, #recs do
  if discard_match(recs[i], id, '') then
    return {expired, recs[i], -1}
  end
end
if #recs < n then
  return {expired, '', -1}
end
return {expired, '', off + n}
