-- enqueue.lua: store a batch of messages of one queue. A message whose
-- run-at is after now becomes a timer (delayed ZSET + timers HASH, see
-- internal/timers) that a promoter moves to ready when due; the others join
-- the back of ready, in ARGV order. A timer whose ID a pending timer of the
-- queue already has (or an earlier message of this batch) is refused and
-- named in the reply; the rest are stored.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:delayed   ZSET timer ID (= message ID), score = due time (unix ms)
-- KEYS[3] <prefix>:{<queue>}:lease     ZSET stored message in flight (counted for the cap)
-- KEYS[4] <prefix>:{<queue>}:timers    HASH timer ID -> stored message
-- ARGV[1] max messages the queue may hold (ready + delayed + in flight); 0: no cap
-- ARGV[3k-1], ARGV[3k], ARGV[3k+1] for k >= 1: run-at (unix ms; 0: now),
--   message ID, stored message (deliveries 1: the count of its first
--   delivery, see lib.lua)
-- Reply: the numbers k of the messages refused as duplicate timers (empty:
-- all stored). Error "CONVEYOR QUEUE_FULL <detail>" when the batch would
-- take the queue past its cap; nothing is stored then.
-- Bounded: one iteration per message; the caller sends at most 512.

local ready, delayed, timers = KEYS[1], KEYS[2], KEYS[4]
local cap = tonumber(ARGV[1])
local n = (#ARGV - 1) / 3

if cap > 0 then
  local size = redis.call('LLEN', ready) + redis.call('ZCARD', delayed) + redis.call('ZCARD', KEYS[3])
  if size + n > cap then
    return redis.error_reply('CONVEYOR QUEUE_FULL ' .. size .. ' held + ' .. n .. ' new > ' .. cap)
  end
end

local now, head -- read only when a message asks for a delay
local push, dups, soonest = {}, {}, nil
for i = 2, #ARGV, 3 do
  local at = tonumber(ARGV[i])
  if at > 0 and not now then
    now = now_ms()
    head = timer_head(delayed)
  end
  if at > 0 and at > now then
    local id = ARGV[i + 1]
    if redis.call('ZSCORE', delayed, id) then
      dups[#dups + 1] = (i + 1) / 3
    else
      timer_put(delayed, timers, id, ARGV[i], ARGV[i + 2]) -- at as sent: a number would be formatted again
      if not soonest or at < soonest then
        soonest = at
      end
    end
  else
    push[#push + 1] = ARGV[i + 2]
  end
end
bulk('LPUSH', ready, push)
if soonest then
  timer_wake(delayed, head, soonest)
end
return dups
