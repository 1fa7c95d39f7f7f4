-- admit.lua: apply a queue's concurrency limits (internal/limits) to the
-- entries one XREADGROUP ... > read for a consumer outside Lua (fetch.go:
-- readNew, readBlocking), before they are handed out.
--
-- The driver runs it after a read whose entries may be over a limit: one
-- that found the queue's limits key (an EXISTS in the read's round trip),
-- and every blocking read that returned entries (a blocking command cannot
-- share a pipeline). A queue without limits costs one HGETALL, and the
-- reply is empty.
--
-- An entry is admitted only while it is pending for this consumer with
-- the delivery count a first read gives (1): one taken over since (its
-- lease ran out before this call) is not this consumer's to hand out. An
-- entry whose job was cancelled since the read (its entry ID is in the
-- marks ZSET, internal/cancels) is XACKed and XDELed and its mark removed,
-- as a takeover removes it (fetch.lua): not handed out, it would neither
-- run nor, parked, keep its mark. When it belongs to a group
-- (internal/groups), the next waiting job of its group is appended to the
-- stream; it may be a job a slot let in, so the jobs waiting for a limit
-- with a free slot are let in too (limit_pump). The other entries take
-- their slots, held under their entry IDs, or wait in a limit's line
-- (limit_admit in lib.lua).
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:wake     ZSET wake signal (internal/wake): deleted when the
--          stream is left with no entry, set when a job is let in
-- KEYS[3]  <prefix>:{<queue>}:canceled ZSET entry ID of a cancelled delivery (internal/cancels)
-- KEYS[4..7] the queue's group keys (internal/groups); touched only when a
--          cancelled entry is removed
-- KEYS[8..13] the queue's limit keys (internal/limits): limits, limit_state,
--          limit_of, limit_wait, limit_msgs, limit_jobs
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  lowest entry ID read
-- ARGV[4]  highest entry ID read
-- ARGV[5], ARGV[6], ...  the entry IDs read
--
-- Reply: the entry IDs not to hand out: parked in a limit's line, removed
-- as cancelled, or no longer pending for this consumer with count 1; empty
-- when all are to be handed out (always, when the queue has no limits).
-- Bounded: the caller sends at most 1000 entry IDs; one ranged XPENDING
-- and one XRANGE of them, one XCLAIM of one entry, one ZMSCORE when a
-- delivery of the queue is marked, limit_take's few commands, one XADD per
-- job let in.

local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local L = limit_keys(8)
local cfg = limit_config(L)
if not cfg then
  return {}
end

local n = #ARGV - 4
local asked = {}
for i = 5, #ARGV do
  asked[ARGV[i]] = true
end
-- The entries read are consecutive in the stream (XREADGROUP ... > reads
-- the next ones, and no entry can be added below the last): the range
-- from the lowest to the highest holds them and nothing else.
local mine = {}
local p = redis.pcall('XPENDING', stream, group, ARGV[3], ARGV[4], n, me)
if type(p) == 'table' and not p.err then
  for _, e in ipairs(p) do
    if e[4] == 1 and asked[e[1]] then
      mine[e[1]] = true
    end
  end
end
local ds, ids = {}, {}
if next(mine) then
  for _, e in ipairs(redis.call('XRANGE', stream, ARGV[3], ARGV[4], 'COUNT', n)) do
    if mine[e[1]] then
      ids[#ids + 1] = e[1]
      ds[#ds + 1] = e[1]
      ds[#ds + 1] = 1
      ds[#ds + 1] = entry_body(e[2])
    end
  end
end
-- On a full Redis (maxmemory, noeviction) Redis refuses a script whose
-- first write may take memory (HSET, XADD, ...) and lets one whose first
-- write is another kind go on to the end. Restarting the lease of the
-- first entry found (XCLAIM ... JUSTID counts no delivery; the entry was
-- read a moment ago) is such a first write, so that a full queue with
-- limits still drains.
if #ids > 0 then
  redis.call('XCLAIM', stream, group, me, 0, ids[1], 'JUSTID')
end

-- found: the entries to admit; everything else read is not handed out.
local found = {}
for i = 1, #ids do
  found[ids[i]] = true
end
local out = {}
for i = 5, #ARGV do
  if not found[ARGV[i]] then
    out[#out + 1] = ARGV[i]
  end
end

local canceled = canceled_among(KEYS[3], ids)
local dropped, ended, keep = {}, {}, {}
for i = 1, #ds, 3 do
  if canceled[ds[i]] then
    dropped[#dropped + 1] = ds[i]
    ended[#ended + 1] = ds[i + 2]
  else
    keep[#keep + 1] = ds[i]
    keep[#keep + 1] = ds[i + 1]
    keep[#keep + 1] = ds[i + 2]
  end
end
if #dropped > 0 then
  bulk('XACK', stream, dropped, group)
  bulk('XDEL', stream, dropped)
  bulk('ZREM', KEYS[3], dropped)
  if redis.call('XLEN', stream) == 0 then
    redis.call('DEL', KEYS[2])
  end
  for i = 1, #dropped do
    out[#out + 1] = dropped[i]
  end
end

local parked = limit_admit(stream, group, KEYS[2], L, cfg, keep)
for i = 1, #keep, 3 do
  if parked[keep[i]] then
    out[#out + 1] = keep[i]
  end
end
if #dropped > 0 then
  group_end_push(group_keys(4), ended, stream, 'stream', group, KEYS[2])
  local vs, admit = collect()
  limit_pump(L, admit)
  push_to(stream, 'stream', group, KEYS[2], vs)
end
return out
