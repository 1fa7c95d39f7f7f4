-- reap.lua: one bounded step of crash recovery for one queue: takes up to
-- ARGV[1] messages whose lease ran out and requeues each to the FRONT of
-- ready, recoveries+1, or discards it as poison when that recovery would
-- reach the cap ARGV[2] (see reclaim in lib.lua). There is nothing else to
-- recover: every script that adds or removes a lease does the same to its
-- message in the inflight HASH, so no message is in flight without a lease.
--
-- KEYS[1] <prefix>:{<queue>}:ready         LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease         ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:inflight      HASH receipt -> stored message
-- KEYS[4] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[5] <prefix>:{<queue>}:dead_dropped  STRING count of records the discard count cap trimmed
-- KEYS[6] <prefix>:{<queue>}:dead_expired  STRING count of records the discard age limit trimmed
-- KEYS[7] <prefix>:{<queue>}:reclaimed     ZSET receipt of a lease a reclaim took, score = when (unix ms); see lib.lua
-- KEYS[8] <prefix>:{<queue>}:wake          ZSET wake signal (see lib.lua), set when ready holds messages
-- KEYS[9] <prefix>:{<queue>}:canceled      ZSET receipt of a cancelled delivery (internal/cancels):
--                                          such a delivery's message is removed, not requeued
-- KEYS[10..13] the queue's group keys (internal/groups): a job that ends
--          here (poison, cancelled) lets the next of its group in
-- KEYS[14..19] the queue's limit keys (internal/limits): the leases taken
--          give their slots back
-- ARGV[1] max expired leases to take, >= 1
-- ARGV[2] poison cap: the recovery count at which an expired lease's message
--         is discarded instead of requeued; <= 0 turns the cap off
-- ARGV[3] max discard records kept, >= 1
-- ARGV[4] max age of discard records, ms (<= 0: no age limit)
-- Reply: {requeued, poisoned, next}: how many went back to ready and how
-- many to the discard list (together the expired leases taken, but any
-- whose message was deleted by hand), and the ms until the next lease runs
-- out (-1: none in flight). When ready holds messages afterwards the wake
-- signal is set: what this call requeued, and what a consumer that died
-- after taking the signal (or a write outside the driver) left without one.

local now = now_ms()
local requeued, poisoned = reclaim(KEYS[1], KEYS[2], KEYS[3], KEYS[7], KEYS[9],
  discard_list(KEYS[4], KEYS[5], KEYS[6], ARGV[3], ARGV[4]),
  tonumber(ARGV[2]), now, tonumber(ARGV[1]), group_keys(10), limit_keys(14), KEYS[8])
if redis.call('LLEN', KEYS[1]) > 0 then
  wake(KEYS[8])
end
local next = -1
local nl = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if nl[2] then
  next = math.max(0, tonumber(nl[2]) - now)
end
return {requeued, poisoned, next}
