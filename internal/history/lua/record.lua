-- record.lua: store one sample of a queue's sizes and counters in its
-- history (broker.Historian.RecordSample), once per interval fleet-wide.
--
-- KEYS[1] <prefix>:{<queue>}:history  STREAM, one entry per interval: ID
--         <interval start, unix ms>-0, fields r f d x g l p e (see below)
-- ARGV[1] the interval (ms); ARGV[2] the retention (ms)
-- ARGV[3..10] ready, in flight, delayed, discarded, grouped, limited,
--         processed, failed
-- Reply: {interval start (unix ms, server clock), 1 stored or 0 not, ms
-- until the next interval starts}.
--
-- The interval is the one holding the server's time, so keepers whose
-- clocks disagree still agree on it; a sample is stored only when the
-- stream holds none of that interval or a later one (two keepers for a
-- moment during a hand-over store one). XADD's MINID drops the samples
-- older than the retention, a handful each time, and PEXPIRE drops the
-- whole history a retention after its last sample. O(1) but for the
-- samples trimmed.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local every, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
local at = now - now % every
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if top[1] and tonumber(string.match(top[1][1], '^%d+')) >= at then
  return {at, 0, at + every - now}
end
redis.call('XADD', KEYS[1], 'MINID', string.format('%.0f', at - keep), string.format('%.0f-0', at),
  'r', ARGV[3], 'f', ARGV[4], 'd', ARGV[5], 'x', ARGV[6], 'g', ARGV[7], 'l', ARGV[8], 'p', ARGV[9], 'e', ARGV[10])
redis.call('PEXPIRE', KEYS[1], keep)
return {at, 1, at + every - now}
