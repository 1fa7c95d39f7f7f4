-- fire.lua: store one fire of a cron series as a timer, unless the series
-- already stored a fire at that time or later. The record of the series'
-- last fire and the timer change in this one script, so of any number of
-- instances firing the same time exactly one stores it, and an instance
-- that lags behind can never store an older fire after a newer one.
--
-- KEYS[1] <prefix>:{<queue>}:delayed        ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers         HASH timer ID -> stored message
-- KEYS[3] <prefix>:{<queue>}:cron:<series>  STRING last fire time (unix ms), with a TTL
-- ARGV[1] fire time, unix ms: the timer's due time
-- ARGV[2] timer ID (the fire ID: series and fire time)
-- ARGV[3] stored message
-- ARGV[4] how long the record of the last fire lives, ms
-- ARGV[5] how far ahead of the server's clock a fire may be, ms
-- Reply: 1 when the fire was stored, 0 when it was already. Error
-- "CONVEYOR FIRE_AHEAD <detail>" for a fire further ahead than ARGV[5]:
-- its instance's clock runs ahead, and storing it would make the record
-- refuse every fire of the series until then.

local delayed, timers, last = KEYS[1], KEYS[2], KEYS[3]
local at = tonumber(ARGV[1])
local now = now_ms()
if at > now + tonumber(ARGV[5]) then
  return redis.error_reply('CONVEYOR FIRE_AHEAD fire at ' .. ARGV[1] .. ' is over ' .. ARGV[5] .. ' ms ahead of the server clock ' .. now)
end
local prev = tonumber(redis.call('GET', last) or '')
if (prev and prev >= at) or redis.call('ZSCORE', delayed, ARGV[2]) then
  return 0
end
timer_wake(delayed, timer_head(delayed), ARGV[1]) -- before the first write (see timer_wake)
redis.call('SET', last, ARGV[1], 'PX', ARGV[4])
timer_put(delayed, timers, ARGV[2], ARGV[1], ARGV[3])
return 1
