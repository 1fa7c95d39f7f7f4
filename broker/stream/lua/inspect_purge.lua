-- inspect_purge.lua: one bounded step of a purge of a queue's ready
-- entries (Inspector.PurgeReady): XDELs up to ARGV[2] of the entries after
-- the group's last-delivered-id, oldest (next to be fetched) first. In-flight
-- entries are never purged (they are under a lease). A stream left empty
-- stays, with its group (see ack.lua).
--
-- KEYS[1] <prefix>:{<queue>}:stream  STREAM with the consumer group ARGV[1]
-- ARGV[1] consumer group name
-- ARGV[2] max entries to delete, 1..1000
-- Reply: {deleted, ready before this call}.
-- Bounded: ARGV[2] entries.

local stream, group = KEYS[1], ARGV[1]
local last = last_delivered(stream, group)
if not last then
  return {0, 0}
end
local pending = pending_count(stream, group)
local held = math.max(0, redis.call('XLEN', stream) - pending)
local ids = {}
for _, e in ipairs(redis.call('XRANGE', stream, '(' .. last, '+', 'COUNT', tonumber(ARGV[2]))) do
  ids[#ids + 1] = e[1]
end
if #ids > 0 then
  redis.call('XDEL', stream, unpack(ids))
end
return {#ids, held}
