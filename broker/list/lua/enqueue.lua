-- enqueue.lua: store a batch of messages of one queue, all or none.
-- A message whose run-at is after now waits in the delayed ZSET (fetch
-- promotes it when due); the others join the back of ready, in ARGV order.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:delayed   ZSET stored message, score = run-at (unix ms)
-- KEYS[3] <prefix>:{<queue>}:lease     ZSET stored message in flight (counted for the cap)
-- ARGV[1] max messages the queue may hold (ready + delayed + in flight); 0: no cap
-- ARGV[2k], ARGV[2k+1] for k >= 1: run-at (unix ms; 0: now), stored message
--   (deliveries 1: the count of its first delivery, see lib.lua)
-- Reply: the number of messages stored. Error "CONVEYOR QUEUE_FULL <detail>"
-- when the batch would take the queue past its cap; nothing is stored then.

local ready, delayed = KEYS[1], KEYS[2]
local cap = tonumber(ARGV[1])
local n = (#ARGV - 1) / 2

if cap > 0 then
  local size = redis.call('LLEN', ready) + redis.call('ZCARD', delayed) + redis.call('ZCARD', KEYS[3])
  if size + n > cap then
    return redis.error_reply('CONVEYOR QUEUE_FULL ' .. size .. ' held + ' .. n .. ' new > ' .. cap)
  end
end

local now -- read only when a message asks for a delay
local push, later = {}, {}
for i = 2, #ARGV, 2 do
  local at = tonumber(ARGV[i])
  if at > 0 then
    now = now or now_ms()
  end
  if at > 0 and at > now then
    later[#later + 1] = ARGV[i] -- as sent: a number would be formatted again
    later[#later + 1] = ARGV[i + 1]
  else
    push[#push + 1] = ARGV[i + 1]
  end
end
bulk('LPUSH', ready, push)
bulk('ZADD', delayed, later)
return n
