-- prune.lua: remove from a queue's consumer group the consumers that hold
-- nothing and have been idle for long (stream driver): those of crashed
-- processes, which never ran close.lua.
--
-- One sweep per queue per ARGV[3] across the fleet: the call first takes
-- KEYS[2] with SET NX PX ARGV[3], and a call that finds it taken does
-- nothing more. The sweep reads the group's consumers (XINFO CONSUMERS)
-- and removes (XGROUP DELCONSUMER) each with no pending entry and an idle
-- time (since its last read or claim) over ARGV[2], at most ARGV[4] of
-- them. A consumer holding entries stays: they are taken over after the
-- visibility timeout, and a later sweep removes it.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:prune    STRING "1" while a sweep is not due (PX ARGV[3])
-- ARGV[1]  consumer group name
-- ARGV[2]  idle time (ms) past which a consumer holding nothing is removed
-- ARGV[3]  interval between sweeps (ms)
-- ARGV[4]  most consumers removed per call (count)
--
-- Reply: the number of consumers removed; -1 when a sweep ran within
-- ARGV[3] (KEYS[2] was taken); 0 when the stream or its group does not
-- exist.
-- Bounded: one pass over the group's consumers, at most ARGV[4] removals.
local stream, group = KEYS[1], ARGV[1]
if redis.call('EXISTS', stream) == 0 then
  return 0
end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then
  return -1
end
local cs = redis.pcall('XINFO', 'CONSUMERS', stream, group)
if cs.err then
  return 0 -- no such group
end
local minIdle, limit = tonumber(ARGV[2]), tonumber(ARGV[4])
local removed = 0
for _, c in ipairs(cs) do
  if removed >= limit then
    break
  end
  local f = {}
  for j = 1, #c, 2 do
    f[c[j]] = c[j + 1]
  end
  if f['pending'] == 0 and f['idle'] > minIdle then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, f['name'])
    removed = removed + 1
  end
end
return removed
