-- stats.lua: the figures of a queue's discard list, after a step of age
-- retention (the Go side runs it again when the step dropped as many as it
-- may).
--
-- KEYS[1] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[2] <prefix>:{<queue>}:dead_dropped  STRING count of records the count cap dropped
-- KEYS[3] <prefix>:{<queue>}:dead_expired  STRING count of records dropped for age
-- ARGV[1] max age, ms (<= 0: no age limit)
-- Reply: {dropped for age by this call, records held, dropped by the cap,
-- dropped for age in all, time of the oldest record (unix ms; -1: none or
-- unreadable)}.
-- Bounded: 100 dropped.

local dead = KEYS[1]
local expired = discard_expire(dead, KEYS[3], ARGV[1], now_ms())
local oldest = -1
local rec = redis.call('LINDEX', dead, -1)
if rec then
  oldest = discard_time(rec) or -1
end
return {expired, redis.call('LLEN', dead), tonumber(redis.call('GET', KEYS[2]) or '0'),
  tonumber(redis.call('GET', KEYS[3]) or '0'), oldest}
