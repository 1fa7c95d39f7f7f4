-- promote.lua: move up to ARGV[1] due timers of one queue to its ready
-- structure, earliest first. ZRANGEBYSCORE, the push and the ZREM/HDEL run
-- in this one script, so a timer is promoted exactly once however many
-- promoters run; "due" is by the server's clock, so no promoter's clock can
-- promote early.
--
-- KEYS[1] <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[2] <prefix>:{<queue>}:timers   HASH timer ID -> stored message
-- KEYS[3] <prefix>:{<queue>}:ready    LIST (ARGV[2] "list": LPUSH, the back of the queue)
--      or <prefix>:{<queue>}:stream   STREAM (ARGV[2] "stream": XADD field "m"; the
--                                     stream and group ARGV[3] are created when missing)
-- KEYS[4] <prefix>:{<queue>}:wake     optional: ZSET wake signal, its member added when
--                                     messages were pushed (internal/wake)
-- ARGV[1] max timers to promote, >= 1
-- ARGV[2] "list" or "stream"
-- ARGV[3] consumer group name (stream only)
-- Reply: {promoted, next, late}: next is the time until the next timer is
-- due in microseconds (0 when more are due now), -1 when no timer is
-- pending; late is how late the earliest timer this call promoted was, in
-- microseconds (0 when it promoted none).
-- Bounded: ARGV[1] timers per call.

local delayed, timers, target = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)

local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local n = 0
local late = 0
if #due > 0 then
  late = math.max(0, now_us - tonumber(due[2]) * 1000)
  local ids = {}
  for i = 1, #due, 2 do
    ids[#ids + 1] = due[i]
  end
  -- back: score, ID pairs and ID, body pairs of the timers with a body, to
  -- put them back if the push fails.
  local vs, zback, hback = {}, {}, {}
  for i = 1, #ids, CHUNK do
    local last = math.min(i + CHUNK - 1, #ids)
    local part = redis.call('HMGET', timers, unpack(ids, i, last))
    for j = 1, #part do
      if part[j] then -- a timer without a body was written by hand: dropped
        local id = ids[i + j - 1]
        vs[#vs + 1] = part[j]
        zback[#zback + 1], zback[#zback + 2] = due[2 * (i + j - 1)], id
        hback[#hback + 1], hback[#hback + 2] = id, part[j]
      end
    end
  end
  -- The timers go first: on a full Redis (maxmemory, noeviction) Redis
  -- refuses a script whose first write may take memory (LPUSH, XADD) and
  -- lets one whose first write is a ZREM go on to the end, so that due
  -- timers are still promoted while Redis is full.
  bulk('ZREM', delayed, ids)
  bulk('HDEL', timers, ids)
  -- Redis keeps what a failed script wrote: when the push fails (the
  -- target holds another type, written by hand; a command the ACL
  -- refuses) the timers are put back as they were before the error is
  -- raised, so none is lost. A push fails on its first command, before
  -- anything was pushed; the wake signal, after the jobs are stored, is
  -- sent outside.
  local pushed, err = pcall(push_to, target, ARGV[2], ARGV[3], nil, vs)
  if not pushed then
    bulk('ZADD', delayed, zback)
    bulk('HSET', timers, hback)
    error(err, 0)
  end
  if KEYS[4] and #vs > 0 then
    redis.call('ZADD', KEYS[4], 0, 'w')
  end
  n = #vs
end

local nxt = -1
local head = timer_head(delayed)
if head then
  nxt = math.max(0, head * 1000 - now_us)
end
return {n, nxt, late}
