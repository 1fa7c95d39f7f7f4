-- app_add.lua (tests only): an application's script that adds a job to a
-- queue together with a write of its own, following the contract of
-- Driver.Stored (external.go): create the group with a missing stream, from
-- ID 0, then XADD the stored message as field "m".
--
-- KEYS[1]  <prefix>:{<queue>}:stream     the queue's stream (Driver.StreamKey)
-- KEYS[2]  <prefix>:{<queue>}:app:count  STRING, the application's counter
-- ARGV[1]  consumer group (Driver.Group)
-- ARGV[2]  stored message (Driver.Stored)
--
-- Reply: {entry ID, counter after the increment}.
local stream = KEYS[1]
if redis.call('EXISTS', stream) == 0 then
  redis.call('XGROUP', 'CREATE', stream, ARGV[1], '0', 'MKSTREAM')
end
local id = redis.call('XADD', stream, '*', 'm', ARGV[2])
return {id, redis.call('INCR', KEYS[2])}
