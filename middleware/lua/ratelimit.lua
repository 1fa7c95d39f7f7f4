-- ratelimit.lua: one admission decision of a sliding-window-log limiter:
-- at most ARGV[1] admissions in any window of ARGV[2] ms. The log is a ZSET
-- of the admissions still inside the window; time is the server's (TIME),
-- so skewed worker clocks neither widen nor narrow the window. A refused
-- call writes nothing.
--
-- KEYS[1] <prefix>:rl:{<hash>} (or <prefix>:rl:<name>:{<hash>}), <hash> the first
--         32 hex digits of the SHA-256 of the limiter key (middleware/keys.go)
--         ZSET member = admission token, score = admission time (unix ms);
--         expires one window after the last admission
-- ARGV[1] limit: admissions per window (integer >= 1)
-- ARGV[2] window length, ms (integer >= 1)
-- ARGV[3] token naming this admission, unique per call
-- Reply: {1, now_ms} when admitted (now_ms: the admission time, server unix
--        ms), {0, free_ms} when refused (free_ms: server unix ms at which
--        the oldest admission leaves the window and a slot frees).

local key = KEYS[1]
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- An admission at a counts while now < a + window.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now, ARGV[3])
  redis.call('PEXPIRE', key, window)
  return {1, now}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {0, tonumber(oldest[2]) + window}
