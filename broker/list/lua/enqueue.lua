-- enqueue.lua: store a batch of messages of one queue. A message whose
-- run-at is after now becomes a timer (delayed ZSET + timers HASH, see
-- internal/timers) that a promoter moves to ready when due; the others join
-- the back of ready, in ARGV order. A timer whose ID a pending timer of the
-- queue already has (or an earlier message of this batch) is refused, and
-- so is a message whose unique key is held (SET NX PX: held for the key's
-- TTL by the first message that claimed it); the reply names them, and the
-- rest are stored. A message with a group (internal/groups) joins ready
-- only when its group admits it, else it waits in the group's line; one
-- whose ID a grouped job of the queue has is refused.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:delayed   ZSET timer ID (= message ID), score = due time (unix ms)
-- KEYS[3] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight (counted for the cap)
-- KEYS[4] <prefix>:{<queue>}:timers    HASH timer ID -> stored message
-- KEYS[5] <prefix>:{<queue>}:wake      ZSET wake signal (see lib.lua), set when messages join ready
-- KEYS[6..9] the queue's group keys (internal/groups: group_jobs, groups,
--   group_wait, group_msgs); touched only by a message with a group
-- KEYS[10...] <prefix>:{<queue>}:unique:<key>  STRING the ID of the message
--   holding a unique key, with a TTL
-- ARGV[1] max messages the queue may hold (ready + delayed + in flight +
--   waiting in a group's line); 0: no cap
-- ARGV[2] stride: 5 or 7 items per message
-- then stride items per message, from ARGV[3] on: run-at (unix ms; 0:
--   now), message ID, stored message (deliveries 1: the count of its first
--   delivery, see lib.lua), u: its unique key is KEYS[u] (0: none), the
--   unique key's TTL (ms); with stride 7, its group ("": none) and the
--   group's limit
-- Reply: the numbers k of the refused messages: k for a duplicate timer
-- ID or grouped job ID, -k for a held unique key (empty: all stored).
-- Error "CONVEYOR QUEUE_FULL <detail>" when the batch would take the queue
-- past its cap; nothing is stored then.
-- Bounded: one iteration per message of the call; a queue's messages come
-- in one call (so that Redis refuses it whole or not at all when full).

local ready, delayed, timers = KEYS[1], KEYS[2], KEYS[4]
local cap, stride = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = (#ARGV - 2) / stride

-- ready is read before the first write: Redis keeps what a script wrote
-- before a command of it failed, so a ready key of another type (written
-- by hand) must fail the call here, not at the LPUSH after the batch's
-- timers, unique keys and group records were written.
local waiting = redis.call('LLEN', ready)
if cap > 0 then
  local size = waiting + redis.call('ZCARD', delayed) + redis.call('ZCARD', KEYS[3])
    + redis.call('HLEN', KEYS[9])
  if size + n > cap then
    return redis.error_reply('CONVEYOR QUEUE_FULL ' .. size .. ' held + ' .. n .. ' new > ' .. cap)
  end
end
local push = {}
local function admit(v)
  push[#push + 1] = v
end
local G = group_keys(6)
local dups = enqueue_each(delayed, timers, 3, function(v, i)
  if stride == 7 and ARGV[i + 5] ~= '' then
    return group_hold(G, ARGV[i + 1], ARGV[i + 5], tonumber(ARGV[i + 6]), v, admit)
  end
  admit(v)
end, stride)
if #push > 0 then
  bulk('LPUSH', ready, push)
  wake(KEYS[5])
end
return dups
