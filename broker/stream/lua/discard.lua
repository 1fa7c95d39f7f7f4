-- discard.lua: move one delivery to its queue's discard list (stream driver).
--
-- The delivery is fenced as ack.lua fences (see ack_entries in lib.lua),
-- then XACKed and XDELed; a discard record "d1,<unix ms>,<len(reason)>:
-- <reason><encoded message>" (see internal/codec/discard.go) is pushed on
-- the discard list, whose length is capped at ARGV[6] and whose records may
-- be ARGV[7] old at most (the oldest records are dropped and counted in
-- KEYS[3] and KEYS[4], see internal/discards' lib.lua, which the Go side
-- puts in front). The stored message's recoveries include this entry's
-- crash recoveries (delivery count - 1). An entry deleted while pending is
-- reported as LEASE_LOST, as in requeue.lua. A drained stream stays, with
-- its group (see ack_entries). A discard ends a failed handler run: the
-- queue's stats HASH counts it (field failed); poison discards (fetch.lua)
-- are crash recoveries and are not counted.
--
-- A discard ends the job: when it belongs to a group (internal/groups),
-- the next waiting job of its group is appended to the stream (one EXISTS
-- when the queue has no grouped job), and its delivery gives back its
-- concurrency limit slots (internal/limits), letting the next waiting jobs
-- in (one EXISTS when no delivery of the queue holds a slot).
--
-- When ARGV[8] is above 0 the record of the finished job is written too
-- (internal/records' record_put, which the Go side puts in front), after
-- the discard's own writes: XACK stays the first write, as in ack_entries,
-- so that a full Redis still lets the discard run. Else KEYS[8..10] are
-- not touched.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:dead     LIST of discard records, newest first
-- KEYS[3]  <prefix>:{<queue>}:dead_dropped  STRING count of records the cap trimmed
-- KEYS[4]  <prefix>:{<queue>}:dead_expired  STRING count of records the age limit trimmed
-- KEYS[5]  <prefix>:{<queue>}:stats    HASH processed, failed: cumulative counters
-- KEYS[6]  <prefix>:{<queue>}:reclaimed  ZSET tokens of deliveries whose lease a
--          reclaim took (internal/reclaims); read only for an entry not pending
-- KEYS[7]  <prefix>:{<queue>}:wake     ZSET wake signal: deleted when the stream is left
--          with no entry (as ack.lua)
-- KEYS[8]  <prefix>:{<queue>}:done         HASH job ID -> record of a finished job (internal/records)
-- KEYS[9]  <prefix>:{<queue>}:done_at      ZSET job ID, score = when its record expires (unix ms)
-- KEYS[10] <prefix>:{<queue>}:done_counts  HASH expired, dropped: records retention removed
-- KEYS[11..14] the queue's group keys (internal/groups); KEYS[7] is set when
--          a grouped job is let in
-- KEYS[15..20] the queue's limit keys (internal/limits): limits, limit_state,
--          limit_of, limit_wait, limit_msgs, limit_jobs; KEYS[7] is set when
--          a job waiting for a slot is let in
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  entry ID
-- ARGV[4]  delivery count (the count part of the token)
-- ARGV[5]  reason (bytes)
-- ARGV[6]  max length of the discard list
-- ARGV[7]  max age of discard records, ms (<= 0: no age limit)
-- ARGV[8]  keep the job's record this long, ms (0: write none)
-- ARGV[9]  the job's ID
-- ARGV[10] the record's JSON (internal/records' Args)
-- ARGV[11] the cap on the queue's records, >= 1
--
-- Reply: a one-item array: "OK"; "GONE" when the entry is neither pending
-- in the group nor in the stream (settled already, see lost_status in
-- lib.lua; so when the stream does not exist); else "LEASE_LOST".
local stream, dead = KEYS[1], KEYS[2]
local group, me, id = ARGV[1], ARGV[2], ARGV[3]

if redis.call('EXISTS', stream) == 0 then
  return {lost_status(stream, KEYS[6], id, ARGV[4])}
end
local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
if not p then
  return {lost_status(stream, KEYS[6], id, ARGV[4])}
end
if not (p[2] == me and p[4] == tonumber(ARGV[4])) then
  return {'LEASE_LOST'}
end

local e = redis.call('XRANGE', stream, id, id)[1]
if not e then
  return {'LEASE_LOST'}
end
-- An entry without the field "m" (written by hand) is kept as an empty message.
local m = ''
for j = 1, #e[2], 2 do
  if e[2][j] == 'm' then
    m = e[2][j + 1]
  end
end
local d, a, r, pos = string.match(m, '^1,(%d+),(%d+),(%d+),()')
if d then
  m = '1,' .. d .. ',' .. a .. ',' .. (tonumber(r) + p[4] - 1) .. ',' .. string.sub(m, pos)
end

-- Read before the first write: Redis keeps what a script wrote before a
-- command of it failed, so a discard list of another type (written by
-- hand) must fail the call with the entry pending, not after the XDEL.
redis.call('LLEN', dead)
redis.call('XACK', stream, group, id)
redis.call('XDEL', stream, id)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
discard_push(discard_list(dead, KEYS[3], KEYS[4], ARGV[6], ARGV[7]), now, ARGV[5], m)
redis.call('HINCRBY', KEYS[5], 'failed', 1)
if redis.call('XLEN', stream) == 0 then
  redis.call('DEL', KEYS[7])
end
group_end_push(group_keys(11), {m}, stream, 'stream', group, KEYS[7])
local vs, admit = collect()
limit_end(limit_keys(15), {id}, admit)
limit_push(stream, 'stream', group, KEYS[7], vs)
if tonumber(ARGV[8]) > 0 then
  record_put(KEYS[8], KEYS[9], KEYS[10], now, ARGV[11], ARGV[9], ARGV[8], ARGV[10])
end
return {'OK'}
