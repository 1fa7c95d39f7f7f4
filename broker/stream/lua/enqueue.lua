-- enqueue.lua: store a batch of messages of one queue (stream driver).
--
-- Ready messages are appended to the stream; a message whose run-at is in
-- the future becomes a timer (delayed ZSET + timers HASH, see
-- internal/timers) that a promoter appends when due. A timer whose ID a
-- pending timer of the queue already has (or an earlier message of this
-- batch) is refused and named in the reply; the rest are stored. When the
-- stream does not exist it is created together with its consumer group
-- (read from ID 0), in this same script, so the group never misses an entry.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM, field "m" = encoded message
-- KEYS[2]  <prefix>:{<queue>}:delayed  ZSET timer ID (= message ID), score = due time (unix ms)
-- KEYS[3]  <prefix>:{<queue>}:timers   HASH timer ID -> encoded message
-- ARGV[1]  consumer group name
-- ARGV[2]  max length of the queue (stream entries + delayed), 0 = unlimited
-- ARGV[3k], ARGV[3k+1], ARGV[3k+2] for k >= 1: run-at (unix ms, 0 = now),
--          message ID, encoded message
--
-- Reply: the numbers k of the messages refused as duplicate timers (empty:
-- all stored); or the error reply "CONVEYOR QUEUE_FULL <length> of <max>"
-- and nothing is stored.
-- Bounded: one iteration per message; the caller sends at most 512.
local stream, delayed, timers, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local n = (#ARGV - 2) / 3

local maxlen = tonumber(ARGV[2])
if maxlen > 0 then
  local len = redis.call('XLEN', stream) + redis.call('ZCARD', delayed)
  if len + n > maxlen then
    return redis.error_reply('CONVEYOR QUEUE_FULL ' .. len .. ' of ' .. maxlen)
  end
end

local now = now_ms()
local head = timer_head(delayed)

local ready = false
local dups, soonest = {}, nil
for i = 3, #ARGV, 3 do
  local at = tonumber(ARGV[i])
  if at > now then
    local id = ARGV[i + 1]
    if redis.call('ZSCORE', delayed, id) then
      dups[#dups + 1] = i / 3
    else
      timer_put(delayed, timers, id, ARGV[i], ARGV[i + 2])
      if not soonest or at < soonest then
        soonest = at
      end
    end
  else
    if not ready then
      if redis.call('EXISTS', stream) == 0 then
        redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
      end
      ready = true
    end
    redis.call('XADD', stream, '*', 'm', ARGV[i + 2])
  end
end
if soonest then
  timer_wake(delayed, head, soonest)
end
return dups
