-- delete.lua: delete a queue (Inspector.DeleteQueue, broker.QueueDeleter):
-- count its jobs in each state and, unless jobs are in flight and the
-- delete is not forced, DEL every key of the queue whose name the driver
-- knows, in one command, atomically with the count. Keys whose names hold
-- data (unique keys, cron records, the waits' own keys) are found and
-- deleted from Go afterwards (SCAN), and the registry entry last; see
-- internal/inspect's Deleter.
--
-- In flight are the entries pending in any consumer group of the stream
-- (not only the driver's: a delete takes the whole stream); ready are the
-- stream's entries less those pending in the group ARGV[2], as
-- inspect_sizes.lua counts them, and the jobs waiting in their groups'
-- lines (internal/groups).
--
-- KEYS[1]  <prefix>:{<queue>}:stream               STREAM with the consumer group ARGV[2]
-- KEYS[2]  <prefix>:{<queue>}:delayed              ZSET timer ID, score = due time (unix ms)
-- KEYS[3]  <prefix>:{<queue>}:timers               HASH timer ID -> stored message
-- KEYS[4]  <prefix>:{<queue>}:dead                 LIST of discard records, newest first
-- KEYS[5]  <prefix>:{<queue>}:dead_dropped         STRING count of records the count cap trimmed
-- KEYS[6]  <prefix>:{<queue>}:dead_expired         STRING count of records the age limit trimmed
-- KEYS[7]  <prefix>:{<queue>}:stats                HASH processed, failed: cumulative counters
-- KEYS[8]  <prefix>:{<queue>}:reclaimed            ZSET tokens of deliveries a takeover took
-- KEYS[9]  <prefix>:{<queue>}:wake                 ZSET wake signal of new entries (internal/wake)
-- KEYS[10] <prefix>:{<queue>}:reclaim              ZSET wake signal of expired leases
-- KEYS[11] <prefix>:{<queue>}:prune                STRING present while the next stale-consumer sweep is not due
-- KEYS[12] <prefix>:{<queue>}:paused               STRING present while the queue is paused
-- KEYS[13] <prefix>:{<queue>}:keeper               STRING the keeper's lease (internal/elect)
-- KEYS[14] <prefix>:{<queue>}:keeper_heir          STRING the heir's lease
-- KEYS[15] <prefix>:{<queue>}:keeper_heir:baton    ZSET the standbys' wake signal
-- KEYS[16] <prefix>:{<queue>}:canceled             ZSET marks of cancelled deliveries (internal/cancels)
-- KEYS[17] <prefix>:{<queue>}:done                 HASH job ID -> record of a finished job (internal/records)
-- KEYS[18] <prefix>:{<queue>}:done_at              ZSET job ID, score = when its record expires (unix ms)
-- KEYS[19] <prefix>:{<queue>}:done_counts          HASH expired, dropped: records retention removed
-- KEYS[20..23] the queue's group keys (internal/groups): group_jobs, groups,
--          group_wait, group_msgs (whose jobs count as ready here)
-- KEYS[24..29] the queue's limit keys (internal/limits): limits,
--          limit_state, limit_of, limit_wait (whose jobs count as ready
--          here), limit_msgs, limit_jobs
-- KEYS[30] <prefix>:{<queue>}:history              STREAM samples of sizes and counters (internal/history)
-- KEYS[31] <prefix>:{<queue>}:cron_series          ZSET the index of its cron series (internal/timers)
-- ARGV[1]  "1": delete even while jobs are in flight; else refuse then
-- ARGV[2]  consumer group name
-- Reply: {1 deleted or 0 refused (jobs in flight; nothing deleted), ready,
-- in flight, delayed, discarded, keys deleted}.
-- Bounded: O(1) reads, one XINFO GROUPS (one entry per consumer group of
-- the stream, a handful), and one DEL of 31 keys, which frees every job of
-- the queue: O(jobs held), the one cost of a delete that grows with the
-- queue.

local ready, inflight = 0, 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  local ours = 0
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local name, pending
    for i = 1, #g, 2 do
      if g[i] == 'name' then
        name = g[i + 1]
      elseif g[i] == 'pending' then
        pending = g[i + 1]
      end
    end
    inflight = inflight + (pending or 0)
    if name == ARGV[2] then
      ours = pending or 0
    end
  end
  ready = math.max(0, redis.call('XLEN', KEYS[1]) - ours)
end
ready = ready + redis.call('HLEN', KEYS[23]) + redis.call('ZCARD', KEYS[27])
local delayed = redis.call('ZCARD', KEYS[2])
local discarded = redis.call('LLEN', KEYS[4])
if inflight > 0 and ARGV[1] ~= '1' then
  return {0, ready, inflight, delayed, discarded, 0}
end
local n = redis.call('DEL', unpack(KEYS))
return {1, ready, inflight, delayed, discarded, n}
