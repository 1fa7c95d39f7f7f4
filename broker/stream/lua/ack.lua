-- ack.lua: settle a batch of deliveries as done (stream driver).
--
-- Each delivery is fenced: its entry must be pending in the group, owned by
-- this consumer, with the delivery count the consumer was handed (XACK alone
-- checks neither owner nor count). Acked entries are XACKed and XDELed (the
-- driver never trims, so deleting acked entries is what bounds the stream).
-- A drained stream stays, with its group: idle consumers block on it in
-- XREADGROUP, and each new entry wakes one of them.
--
-- The entries of one batch were mostly delivered together, so one XPENDING
-- over this consumer's entries from ARGV[3] to ARGV[4] usually finds all of
-- them; an XPENDING per ID made fencing cost nearly twice as much (measured
-- in Redis instructions, mostly spent handing replies to Lua). The range
-- only saves lookups: an ID it returns is pending for this consumer with the
-- count it shows; an ID it does not return (lease lost, or past the range's
-- limit of two entries per pair) is looked up on its own. So fencing does
-- not depend on the bounds being right.
--
-- The acked entries are counted in the queue's stats HASH (field
-- processed): one HINCRBY per batch, for the Inspector's throughput.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:stats    HASH processed, failed: cumulative counters
-- KEYS[3]  <prefix>:{<queue>}:reclaimed  ZSET tokens of deliveries whose lease a
--          reclaim took (internal/reclaims); read only for an entry not pending
-- KEYS[4]  <prefix>:{<queue>}:wake     ZSET wake signal (internal/wake): deleted when the
--          stream is left with no entry, so that no signal outlives the work
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  lowest entry ID among the pairs
-- ARGV[4]  highest entry ID among the pairs
-- ARGV[5], ARGV[6], ...  pairs: entry ID, delivery count (the count part of the token)
--
-- Reply: one status per pair, in order: "OK"; "GONE" when the entry is
-- neither pending in the group nor in the stream (settled already, see
-- lost_status in lib.lua; so when the stream does not exist); else
-- "LEASE_LOST" (pending for another consumer or with another count).
-- Bounded: the caller sends at most 512 pairs; the ranged XPENDING returns
-- at most two entries per pair, then at most one XPENDING and one XRANGE
-- per pair it missed.
local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local out = {}

if redis.call('EXISTS', stream) == 0 then
  for i = 5, #ARGV, 2 do
    out[#out + 1] = lost_status(stream, KEYS[3], ARGV[i], ARGV[i + 1])
  end
  return out
end

local seen = {}
for _, p in ipairs(redis.call('XPENDING', stream, group, ARGV[3], ARGV[4], #ARGV - 4, me)) do
  seen[p[1]] = p[4]
end

local ids = {}
for i = 5, #ARGV, 2 do
  local id = ARGV[i]
  local count = seen[id]
  local status = 'LEASE_LOST'
  if count == nil then
    local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
    if p and p[2] == me then
      count = p[4]
    elseif not p then
      status = lost_status(stream, KEYS[3], id, ARGV[i + 1])
    end
  end
  if count == tonumber(ARGV[i + 1]) then
    ids[#ids + 1] = id
    out[#out + 1] = 'OK'
  else
    out[#out + 1] = status
  end
end

if #ids > 0 then
  -- XACK first: it may run on a full Redis (no deny-oom flag), and once a
  -- script has written, Redis lets it finish. A deny-oom HINCRBY first
  -- would have the whole ack refused when Redis is at its maxmemory, the
  -- one time acking (which frees memory) matters most.
  redis.call('XACK', stream, group, unpack(ids))
  redis.call('XDEL', stream, unpack(ids))
  redis.call('HINCRBY', KEYS[2], 'processed', #ids)
  if redis.call('XLEN', stream) == 0 then
    redis.call('DEL', KEYS[4])
  end
end
return out
