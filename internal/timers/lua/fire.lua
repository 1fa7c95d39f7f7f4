-- fire.lua: store one fire of a cron series as a timer, unless the series
-- already stored a fire at that time or later. The record of the series'
-- last fire and the timer change in this one script, so of any number of
-- instances firing the same time exactly one stores it, and an instance
-- that lags behind can never store an older fire after a newer one.
--
-- A stored fire also enters the series in the queue's index of series
-- (KEYS[4], read by CronSeries), scored by when its record expires, so the
-- index holds the series whose records live: the entries whose records
-- expired go (a series' keep is its own, a week or three gaps between its
-- fires, so the index is trimmed by each record's expiry, not by the
-- storing series' keep), and the index expires with its latest record.
-- A refused fire changes nothing: the fire that stored the time did it.
--
-- KEYS[1] <prefix>:{<queue>}:delayed        ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers         HASH timer ID -> stored message
-- KEYS[3] <prefix>:{<queue>}:cron:<series>  STRING last fire time (unix ms), with a TTL
-- KEYS[4] <prefix>:{<queue>}:cron_series    ZSET series name, score = when its record expires (unix ms)
-- ARGV[1] fire time, unix ms: the timer's due time
-- ARGV[2] timer ID (the fire ID: series and fire time)
-- ARGV[3] stored message
-- ARGV[4] how long the record of the last fire lives, ms
-- ARGV[5] how far ahead of the server's clock a fire may be, ms
-- ARGV[6] the series' name (the member of KEYS[4])
-- Reply: 1 when the fire was stored, 0 when it was already. Error
-- "CONVEYOR FIRE_AHEAD <detail>" for a fire further ahead than ARGV[5]:
-- its instance's clock runs ahead, and storing it would make the record
-- refuse every fire of the series until then.
-- Cost of a stored fire: O(log n) in the timers and in the series of the
-- queue (ZADD, ZREMRANGEBYSCORE, ZRANGE -1 -1, PEXPIRE), plus the index
-- entries that expired, each removed once.

local delayed, timers, last, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local at = tonumber(ARGV[1])
local now = now_ms()
if at > now + tonumber(ARGV[5]) then
  return redis.error_reply('CONVEYOR FIRE_AHEAD fire at ' .. ARGV[1] .. ' is over ' .. ARGV[5] .. ' ms ahead of the server clock ' .. now)
end
local prev = tonumber(redis.call('GET', last) or '')
if (prev and prev >= at) or redis.call('ZSCORE', delayed, ARGV[2]) then
  return 0
end
-- Read before the first write: Redis keeps what a script wrote before a
-- command of it failed, so a timers HASH of another type (written by
-- hand) must fail the fire before its record says it was stored.
redis.call('HEXISTS', timers, ARGV[2])
timer_wake(delayed, timer_head(delayed), ARGV[1]) -- before the first write (see timer_wake)
-- The record and its index entry expire at the same millisecond: keep
-- from now (the server's TIME), given to SET as an absolute time, as a
-- relative PX counts from the server's own clock reading, which may be a
-- millisecond later.
local expires = string.format('%.0f', now + tonumber(ARGV[4]))
timer_put(delayed, timers, ARGV[2], ARGV[1], ARGV[3])
redis.call('SET', last, ARGV[1], 'PXAT', expires)
redis.call('ZADD', index, expires, ARGV[6])
redis.call('ZREMRANGEBYSCORE', index, '-inf', string.format('(%.0f', now))
local latest = tonumber(redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')[2])
redis.call('PEXPIRE', index, latest - now) -- at least ARGV[4]: the entry just added
return 1
