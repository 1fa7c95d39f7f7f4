-- ack.lua: settle a batch of deliveries as done (stream driver).
--
-- Each delivery is fenced (its entry pending in the group, owned by this
-- consumer, with the delivery count it was handed out with), then its entry
-- is XACKed and XDELed and counted in the stats HASH: see ack_entries in
-- lib.lua, which ack_record.lua shares. A batch in which some delivery asks
-- for a record of its finished job or belongs to a group (internal/groups)
-- runs ack_record.lua instead, so this script never touches the record
-- keys nor the group keys.
--
-- The deliveries settled give back their concurrency limit slots
-- (internal/limits), held under their entry IDs, and the jobs that lets
-- in are appended to the stream: one EXISTS when no delivery of the queue
-- holds a slot.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:stats    HASH processed, failed: cumulative counters
-- KEYS[3]  <prefix>:{<queue>}:reclaimed  ZSET tokens of deliveries whose lease a
--          reclaim took (internal/reclaims); read only for an entry not pending
-- KEYS[4]  <prefix>:{<queue>}:wake     ZSET wake signal (internal/wake): deleted when the
--          stream is left with no entry, so that no signal outlives the work;
--          set when a job waiting for a slot is let in
-- KEYS[5..10] the queue's limit keys (internal/limits): limits, limit_state,
--          limit_of, limit_wait, limit_msgs, limit_jobs
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
-- per pair it missed; with slots held, a few commands and one XADD per job
-- let in (at most LET_IN_MAX, internal/limits).
local out, ids = ack_entries(5, 2)
local vs, admit = collect()
limit_end(limit_keys(5), ids, admit)
limit_push(KEYS[1], 'stream', ARGV[1], KEYS[4], vs)
return out
