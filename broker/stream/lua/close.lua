-- close.lua: remove a consumer from its group when it holds no pending entry.
--
-- XGROUP DELCONSUMER drops the consumer's pending entries with it, so the
-- check and the removal run together here; a consumer that still holds
-- entries stays, and its entries are taken over after the visibility timeout.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
--
-- Reply: 1 removed (or nothing to remove: no stream, no group), 0 kept
-- because it holds pending entries.
local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
if redis.call('EXISTS', stream) == 0 then
  return 1
end
local p = redis.pcall('XPENDING', stream, group, '-', '+', 1, me)
if p.err then
  return 1 -- no such group
end
if #p > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', stream, group, me)
return 1
