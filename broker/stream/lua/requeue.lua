-- requeue.lua: hand a batch of deliveries back to their queue (stream driver);
-- Consumer.Retry (attempt + 1, maybe later), Consumer.Postpone (no attempt
-- counted, maybe later) and Consumer.Release (at once, no attempt counted)
-- run it.
--
-- Each delivery is fenced as in ack.lua. The entry is then XACKed and XDELed
-- and its message stored again with a new header: attempt + ARGV[3], and the
-- crash recoveries so far (delivery count - 1) added to the stored recoveries,
-- because a new entry starts with a delivery count of 0. A run-at in the
-- future makes the message a timer under its ID (or a free variant of it,
-- see timer_free in internal/timers), waking the promoters when it is the
-- earliest (the PUBLISH comes before the first write, so a user the ACL
-- refuses it fails the call with nothing written); else it is appended to
-- the stream, which wakes blocked readers. An entry deleted while pending
-- cannot be stored again: it is reported as LEASE_LOST and left in the PEL,
-- where XAUTOCLAIM finds it and the driver reports it. An entry whose job
-- was cancelled (its ID is in the marks ZSET, internal/cancels) is XACKed
-- and XDELed and not stored again: the job is removed, its mark with it,
-- and when it belongs to a group (internal/groups) the next waiting job of
-- its group is appended to the stream. A grouped job handed back otherwise
-- keeps its place in its group: its group waits for it.
--
-- Every delivery handed back or removed gives back its concurrency limit
-- slots (internal/limits), held under the entry ID it no longer has: the
-- message stored again takes slots anew when it is fetched. The jobs that
-- lets in are appended to the stream after the messages handed back (one
-- EXISTS when no delivery of the queue holds a slot).
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:delayed  ZSET timer ID, score = due time (unix ms)
-- KEYS[3]  <prefix>:{<queue>}:timers   HASH timer ID -> encoded message
-- KEYS[4]  <prefix>:{<queue>}:stats    HASH processed, failed: cumulative
--          counters; a retry (ARGV[3] > 0) is a failed handler run, counted
--          in failed (a postpone or a release is not)
-- KEYS[5]  <prefix>:{<queue>}:reclaimed  ZSET tokens of deliveries whose lease a
--          reclaim took (internal/reclaims); read only for an entry not pending
-- KEYS[6]  <prefix>:{<queue>}:wake     ZSET wake signal (internal/wake), set when entries
--          were appended
-- KEYS[7]  <prefix>:{<queue>}:canceled  ZSET entry ID of a cancelled delivery (internal/cancels)
-- KEYS[8..11] the queue's group keys (internal/groups); touched only when a
--          cancelled delivery is removed
-- KEYS[12..17] the queue's limit keys (internal/limits): limits, limit_state,
--          limit_of, limit_wait, limit_msgs, limit_jobs; KEYS[6] is set when
--          a job waiting for a slot is let in
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  attempt increment: 1 for a retry, 0 for a postpone or a release
-- ARGV[4], ARGV[5], ARGV[6], ...  triples: entry ID, delivery count (the count part of the token),
--          the wait until it is due (ms from the server's now, 0 = now)
--
-- Reply: one status per triple, in order: "OK"; "GONE" when the entry is
-- neither pending in the group nor in the stream (settled already, see
-- lost_status in lib.lua; so when the stream does not exist); else
-- "LEASE_LOST".
-- Bounded: one iteration per triple; the caller sends at most 512 triples.
-- A removed grouped job lets at most its group's limit of jobs in; the
-- slots given back let at most LET_IN_MAX jobs in (internal/limits).
local stream, delayed = KEYS[1], KEYS[2]
local group, me = ARGV[1], ARGV[2]
local inc = tonumber(ARGV[3])
local out = {}

if redis.call('EXISTS', stream) == 0 then
  for i = 4, #ARGV, 3 do
    out[#out + 1] = lost_status(stream, KEYS[5], ARGV[i], ARGV[i + 1])
  end
  return out
end

local now = now_ms_up()

-- The wake-up for the earliest timer the call may add comes before the
-- first write (see timer_wake in internal/timers).
local soonest
for i = 6, #ARGV, 3 do
  local wait = tonumber(ARGV[i])
  if wait > 0 and (not soonest or wait < soonest) then
    soonest = wait
  end
end
if soonest then
  timer_wake(delayed, timer_head(delayed), due(now, soonest))
end

local ids = {}
for i = 4, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
end
local canceled = canceled_among(KEYS[7], ids)

local requeued = 0
local added = false
-- ended: the job IDs of the cancelled deliveries removed; acked: the
-- entry IDs of all the deliveries settled, whose slots go back.
local ended, acked = {}, {}
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  local status = 'LEASE_LOST'
  local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
  if not p then
    status = lost_status(stream, KEYS[5], id, ARGV[i + 1])
  elseif p[2] == me and p[4] == tonumber(ARGV[i + 1]) then
    local e = redis.call('XRANGE', stream, id, id)[1]
    local m
    if e then
      for j = 1, #e[2], 2 do
        if e[2][j] == 'm' then
          m = e[2][j + 1]
        end
      end
    end
    local a, r, pos, mid
    if m then
      a, r, pos = string.match(m, '^1,%d+,(%d+),(%d+),()')
    end
    if a then
      mid = stored_id(m, pos)
      if not mid then
        a = nil
      end
    end
    if a then
      redis.call('XACK', stream, group, id)
      redis.call('XDEL', stream, id)
      acked[#acked + 1] = id
      if canceled[id] then
        redis.call('ZREM', KEYS[7], id)
        ended[#ended + 1] = m
        status = 'OK'
        a = nil
      end
    end
    if a then
      m = '1,0,' .. (tonumber(a) + inc) .. ',' .. (tonumber(r) + p[4] - 1) .. ',' .. string.sub(m, pos)
      local wait = tonumber(ARGV[i + 2])
      -- Redis keeps the XACK and XDEL above if a later command fails: a
      -- timer that cannot be stored (a key of another type, written by
      -- hand; a command the ACL refuses) leaves no part behind, and the
      -- message goes back to the stream at once rather than being lost.
      local tid
      if wait > 0 and not pcall(function()
        tid = timer_free(delayed, mid)
        if tid then
          timer_put(delayed, KEYS[3], tid, due(now, wait), m)
        end
      end) then
        if tid then
          redis.pcall('ZREM', delayed, tid)
        end
        tid = nil
      end
      if not tid then
        redis.call('XADD', stream, '*', 'm', m)
        added = true
      end
      status = 'OK'
      requeued = requeued + 1
    end
  end
  out[#out + 1] = status
end
if inc > 0 and requeued > 0 then
  redis.call('HINCRBY', KEYS[4], 'failed', requeued)
end
if added then
  redis.call('ZADD', KEYS[6], 0, 'w')
end
group_end_push(group_keys(8), ended, stream, 'stream', group, KEYS[6])
local vs, admit = collect()
limit_end(limit_keys(12), acked, admit)
limit_push(stream, 'stream', group, KEYS[6], vs)
return out
