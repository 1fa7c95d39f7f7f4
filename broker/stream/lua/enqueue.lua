-- enqueue.lua: store a batch of messages of one queue (stream driver).
--
-- Ready messages are appended to the stream; messages whose run-at is in the
-- future wait in the delayed ZSET until fetch.lua promotes them. When the
-- stream does not exist it is created together with its consumer group (read
-- from ID 0), in this same script, so the group never misses an entry.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM, field "m" = encoded message
-- KEYS[2]  <prefix>:{<queue>}:delayed  ZSET, score = run-at (unix ms), member = encoded message
-- ARGV[1]  consumer group name
-- ARGV[2]  max length of the queue (stream entries + delayed), 0 = unlimited
-- ARGV[3], ARGV[4], ...  pairs: run-at (unix ms, 0 = now), encoded message
--
-- Reply: the number of messages stored; or the error reply
-- "CONVEYOR QUEUE_FULL <length> of <max>" and nothing is stored.
-- Bounded: one iteration per pair; the caller sends at most 512 pairs.
local stream, delayed, group = KEYS[1], KEYS[2], ARGV[1]
local n = (#ARGV - 2) / 2

local maxlen = tonumber(ARGV[2])
if maxlen > 0 then
  local len = redis.call('XLEN', stream) + redis.call('ZCARD', delayed)
  if len + n > maxlen then
    return redis.error_reply('CONVEYOR QUEUE_FULL ' .. len .. ' of ' .. maxlen)
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local ready = false
for i = 3, #ARGV, 2 do
  local at = tonumber(ARGV[i])
  if at > now then
    redis.call('ZADD', delayed, at, ARGV[i + 1])
  else
    if not ready then
      if redis.call('EXISTS', stream) == 0 then
        redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
      end
      ready = true
    end
    redis.call('XADD', stream, '*', 'm', ARGV[i + 1])
  end
end
return n
