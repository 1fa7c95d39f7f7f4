-- enqueue.lua: store a batch of messages of one queue (stream driver).
--
-- Ready messages are appended to the stream; a message whose run-at is in
-- the future becomes a timer (delayed ZSET + timers HASH, see
-- internal/timers) that a promoter appends when due. A timer whose ID a
-- pending timer of the queue already has (or an earlier message of this
-- batch) is refused, and so is a message whose unique key is held (SET NX
-- PX: held for the key's TTL by the first message that claimed it); the
-- reply names them, and the rest are stored. A message with a group
-- (internal/groups) is appended only when its group admits it, else it
-- waits in the group's line; one whose ID a grouped job of the queue has
-- is refused. When the stream does not exist it is created together with
-- its consumer group (read from ID 0), in this same script, so the group
-- never misses an entry.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM, field "m" = encoded message
-- KEYS[2]  <prefix>:{<queue>}:delayed  ZSET timer ID (= message ID), score = due time (unix ms)
-- KEYS[3]  <prefix>:{<queue>}:timers   HASH timer ID -> encoded message
-- KEYS[4]  <prefix>:{<queue>}:wake     ZSET wake signal (internal/wake), set when entries are added
-- KEYS[5..8] the queue's group keys (internal/groups: group_jobs, groups,
--          group_wait, group_msgs); touched only by a message with a group,
--          and group_msgs by the cap
-- KEYS[9...] <prefix>:{<queue>}:unique:<key>  STRING the ID of the message
--          holding a unique key, with a TTL
-- ARGV[1]  consumer group name
-- ARGV[2]  max length of the queue (stream entries + delayed + waiting in a
--          group's line), 0 = unlimited
-- ARGV[3]  layout of the rest: "1", "5" or "7" items per message
--          "1": ARGV[k+3] for message k >= 1 is the encoded message, to be
--          appended now with no unique key nor group (the common case, sent
--          without the other items, which would cost per message on both
--          sides)
--          "5": from ARGV[4] on, five items per message: run-at (unix ms,
--          0 = now), message ID, encoded message, u: its unique key is
--          KEYS[u] (0: none), the unique key's TTL (ms)
--          "7": the same five, then its group ("": none) and the group's
--          limit (>= 1)
--
-- Reply: the numbers k of the refused messages: k for a duplicate timer ID
-- or grouped job ID, -k for a held unique key (empty: all stored); or the
-- error reply "CONVEYOR QUEUE_FULL <length> of <max>" and nothing is
-- stored.
-- Bounded: one iteration per message of the call; a queue's messages come
-- in one call (so that Redis refuses it whole or not at all when full).
local stream, delayed, timers, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local stride = tonumber(ARGV[3])
local n = (#ARGV - 3) / stride

local maxlen = tonumber(ARGV[2])
if maxlen > 0 then
  local len = redis.call('XLEN', stream) + redis.call('ZCARD', delayed) + redis.call('HLEN', KEYS[8])
  if len + n > maxlen then
    return redis.error_reply('CONVEYOR QUEUE_FULL ' .. len .. ' of ' .. maxlen)
  end
end

-- ensure_group creates the stream with its group when the stream is
-- missing, before the first entry goes in.
local function ensure_group()
  if redis.call('EXISTS', stream) == 0 then
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  end
end

if stride == 1 then
  ensure_group()
  for i = 4, #ARGV do
    redis.call('XADD', stream, '*', 'm', ARGV[i])
  end
  redis.call('ZADD', KEYS[4], 0, 'w')
  return {}
end

local ready = false
local function admit(v)
  if not ready then
    ensure_group()
    ready = true
  end
  redis.call('XADD', stream, '*', 'm', v)
end
local G = group_keys(5)
local dups = enqueue_each(delayed, timers, 4, function(v, i)
  if stride == 7 and ARGV[i + 5] ~= '' then
    return group_hold(G, ARGV[i + 1], ARGV[i + 5], tonumber(ARGV[i + 6]), v, admit)
  end
  admit(v)
end, stride)
if ready then
  redis.call('ZADD', KEYS[4], 0, 'w')
end
return dups
