-- cancel.lua: look for a job by ID in one stretch of a queue's ready or
-- in-flight entries and cancel it there (Driver.CancelJob, through
-- internal/cancels, which walks each state oldest entry first, one stretch
-- per call, passing back the last entry ID it saw, as inspect_find.lua
-- does; inspect_lib.lua says which entries are in which state).
--
-- A ready entry (after the group's last-delivered-id: no consumer read it)
-- is XDELed, as inspect_purge.lua deletes ready entries; a stream left with
-- no entry loses its wake signal, as in ack.lua. Its space counts again
-- toward Config.MaxLen at once (enqueue.lua measures XLEN). A ready walk
-- starts no earlier than the group's last-delivered-id as this call reads
-- it, so an entry read since an earlier stretch is never deleted here.
--
-- Groups (internal/groups): a job waiting in its group's line counts as
-- ready; the first ready stretch looks there first (one HGET) and removes
-- it from the line: it never runs. A ready entry deleted ends its job: when
-- it belongs to a group, the next waiting job of its group is appended to
-- the stream (one EXISTS when the queue has no grouped job).
--
-- Concurrency limits (internal/limits): a job waiting in a limit's line
-- for a slot counts as ready too; the first ready stretch looks there as
-- well (one HGET) and removes it from the line. When it belongs to a
-- group, it ends its job there: the next waiting job of its group is
-- appended to the stream. A ready entry deleted may be a job a slot let
-- in, which takes the slot only when read: the jobs waiting for a limit
-- with a free slot are let in (limit_pump; one HGETALL when the queue has
-- no limit state).
--
-- An in-flight entry (pending in the group) is marked: mark_canceled
-- (internal/cancels) adds its entry ID to the marks ZSET and publishes the
-- job ID on the queue's cancel channel. The entry ID names the delivery: a
-- retry or a release stores the message as a new entry, so a later job
-- under the same ID is not affected. Extend then reports the delivery
-- CANCELED (extend.lua), and a takeover of its lease removes it
-- (fetch.lua). The mark of a job cancelled twice keeps its first time.
--
-- KEYS[1] <prefix>:{<queue>}:stream    STREAM with the consumer group ARGV[1]
-- KEYS[2] <prefix>:{<queue>}:canceled  ZSET entry ID of a cancelled delivery,
--         score = when (unix ms); see internal/cancels
-- KEYS[3] <prefix>:{<queue>}:wake      ZSET wake signal (internal/wake): deleted when the
--         stream is left with no entry, set when a grouped job is let in
-- KEYS[4..7] the queue's group keys (internal/groups); read only in the
--         ready state
-- KEYS[8..13] the queue's limit keys (internal/limits): limits, limit_state,
--         limit_of, limit_wait, limit_msgs, limit_jobs; read only in the
--         ready state
-- ARGV[1] consumer group name
-- ARGV[2] "ready" or "in_flight"
-- ARGV[3] job (message) ID
-- ARGV[4] cursor: the entry ID to go on after, "" to start
-- ARGV[5] entries to look at, 1..1000
-- ARGV[6] the queue's cancel channel <prefix>:{<queue>}:cancels
-- Reply: {1, ""} when found (and cancelled); else {0, cursor to go on
-- after ("": the state's entries end within this stretch)}.
-- Bounded: ARGV[5] entries, one XPENDING for an in-flight match; a ready
-- match lets at most its group's limit of jobs in, and per limit at most
-- LET_IN_MAX jobs waiting for a slot (internal/limits).

local stream, group, mode, id = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local cursor, n = ARGV[4], tonumber(ARGV[5])
local G = group_keys(4)
if mode == 'ready' and cursor == '' then
  if group_unwait(G, id) then
    return {1, ''}
  end
  local v = limit_unwait(limit_keys(8), id)
  if v then
    group_end_push(G, {v}, stream, 'stream', group, KEYS[3])
    return {1, ''}
  end
end
local last = last_delivered(stream, group)
if not last then
  return {0, ''}
end

local r = stretch(stream, mode, cursor, last, n)
if not r then
  return {0, ''}
end
for _, e in ipairs(r) do
  if is_job(entry_body(e[2]), id) then
    if mode == 'ready' then
      redis.call('XDEL', stream, e[1])
      if redis.call('XLEN', stream) == 0 then
        redis.call('DEL', KEYS[3])
      end
      group_end_push(G, {entry_body(e[2])}, stream, 'stream', group, KEYS[3])
      local vs, admit = collect()
      limit_pump(limit_keys(8), admit)
      push_to(stream, 'stream', group, KEYS[3], vs)
      return {1, ''}
    end
    if redis.call('XPENDING', stream, group, e[1], e[1], 1)[1] then
      mark_canceled(KEYS[2], ARGV[6], now_ms(), e[1], id)
      return {1, ''}
    end
  end
end
if #r < n then
  return {0, ''}
end
return {0, r[#r][1]}
