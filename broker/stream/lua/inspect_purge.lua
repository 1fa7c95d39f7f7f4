-- inspect_purge.lua: one bounded step of a purge of a queue's ready
-- entries (Inspector.PurgeReady): XDELs up to ARGV[2] of the entries after
-- the group's last-delivered-id, oldest (next to be fetched) first. In-flight
-- entries are never purged (they are under a lease). A stream left empty
-- stays, with its group (see ack.lua). A grouped job purged ends: the next
-- waiting job of its group (internal/groups) is appended to the stream, and
-- a later step may purge it. An entry purged may be a job a slot let in,
-- which takes the slot only when read: the jobs waiting for a limit with a
-- free slot are let in (limit_pump, internal/limits), and a later step may
-- purge them too.
--
-- KEYS[1] <prefix>:{<queue>}:stream  STREAM with the consumer group ARGV[1]
-- KEYS[2] <prefix>:{<queue>}:wake    ZSET wake signal (internal/wake), set when a
--         grouped job is let in
-- KEYS[3..6] the queue's group keys (internal/groups); read only when the
--         queue has grouped jobs (one EXISTS otherwise)
-- KEYS[7..12] the queue's limit keys (internal/limits): limits, limit_state,
--         limit_of, limit_wait, limit_msgs, limit_jobs; read when entries
--         were purged (one HGETALL when the queue has no limit state)
-- ARGV[1] consumer group name
-- ARGV[2] max entries to delete, 1..1000
-- Reply: {deleted, ready before this call}.
-- Bounded: ARGV[2] entries, and at most their groups' limits of jobs let
-- in, and per concurrency limit at most LET_IN_MAX.

local stream, group = KEYS[1], ARGV[1]
local last = last_delivered(stream, group)
if not last then
  return {0, 0}
end
local pending = pending_count(stream, group)
local held = math.max(0, redis.call('XLEN', stream) - pending)
local G = group_keys(3)
local grouped = redis.call('EXISTS', G.jobs) == 1
local ids, jobs = {}, {}
for _, e in ipairs(redis.call('XRANGE', stream, '(' .. last, '+', 'COUNT', tonumber(ARGV[2]))) do
  ids[#ids + 1] = e[1]
  if grouped then
    jobs[#jobs + 1] = entry_body(e[2])
  end
end
if #ids > 0 then
  redis.call('XDEL', stream, unpack(ids))
end
if grouped then
  group_end_push(G, jobs, stream, 'stream', group, KEYS[2])
end
local vs, admit = collect()
if #ids > 0 then
  limit_pump(limit_keys(7), admit)
end
push_to(stream, 'stream', group, KEYS[2], vs)
return {#ids, held}
