-- ack_record.lua: ack.lua for a batch in which some deliveries ask for a
-- record of their finished job (internal/records, broker.Records) or belong
-- to a group (internal/groups; stream driver). The batch is settled exactly
-- as ack.lua settles it (ack_entries in lib.lua), then the record of each
-- delivery that settled ("OK") and asked for one (keep > 0) is written, and
-- the grouped jobs that settled end: the next waiting job of each of their
-- groups is appended to the stream, in the same script. A delivery whose
-- settle fails (lease lost, settled already) leaves no record and lets no
-- job in. The records and the groups are written after the settle's own
-- writes, XACK first, so that a full Redis (maxmemory, noeviction) still
-- lets the ack run (see ack_entries).
--
-- The deliveries settled give back their concurrency limit slots, as in
-- ack.lua (internal/limits).
--
-- A script of its own rather than an optional part of ack.lua: a batch
-- without records or groups keeps ack.lua's KEYS, ARGV and cost unchanged.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:stats    HASH processed, failed: cumulative counters
-- KEYS[3]  <prefix>:{<queue>}:reclaimed  ZSET tokens of deliveries whose lease a
--          reclaim took (internal/reclaims); read only for an entry not pending
-- KEYS[4]  <prefix>:{<queue>}:wake     ZSET wake signal (internal/wake): deleted when the
--          stream is left with no entry, set when a grouped job is let in
-- KEYS[5]  <prefix>:{<queue>}:done         HASH job ID -> record of a finished job (internal/records)
-- KEYS[6]  <prefix>:{<queue>}:done_at      ZSET job ID, score = when its record expires (unix ms)
-- KEYS[7]  <prefix>:{<queue>}:done_counts  HASH expired, dropped: records retention removed
-- KEYS[8..11] the queue's group keys (internal/groups); touched only when a
--          grouped delivery settled
-- KEYS[12..17] the queue's limit keys (internal/limits); KEYS[4] is set when
--          a job waiting for a slot is let in
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  lowest entry ID among the deliveries
-- ARGV[4]  highest entry ID among the deliveries
-- ARGV[5]  the cap on the queue's records, >= 1
-- ARGV[6], ARGV[7], ...  six per delivery: entry ID, delivery count (the
--          count part of the token), job ID, keep its record this long (ms;
--          0: no record), the record's JSON (internal/records' Args),
--          grouped ("1": its message has a group, else "0")
--
-- Reply: as ack.lua's, one status per delivery, in order.
-- Bounded: as ack.lua, plus per delivery recorded one record_put (a
-- handful of commands, and at most two retention steps of 100 records),
-- plus per grouped delivery settled a few commands and one XADD per job
-- let in.
local out, ids = ack_entries(6, 6)
local now
local ended = {}
for k = 1, #out do
  local i = 6 + 6 * (k - 1)
  if out[k] == 'OK' then
    if ARGV[i + 3] ~= '0' then
      now = now or now_ms()
      record_put(KEYS[5], KEYS[6], KEYS[7], now, ARGV[5], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
    end
    if ARGV[i + 5] == '1' then
      ended[#ended + 1] = ARGV[i + 2]
    end
  end
end
local vs, admit = collect()
group_release(group_keys(8), ended, admit)
push_to(KEYS[1], 'stream', ARGV[1], KEYS[4], vs)
vs, admit = collect()
limit_end(limit_keys(12), ids, admit)
limit_push(KEYS[1], 'stream', ARGV[1], KEYS[4], vs)
return out
