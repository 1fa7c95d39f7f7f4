-- reap.lua: one bounded step of crash recovery for one queue: requeues up to
-- ARGV[1] messages whose lease ran out to the FRONT of ready, recoveries+1.
-- There is nothing else to recover: the lease ZSET is the in-flight
-- structure, so no message can be in flight without a lease.
--
-- KEYS[1] <prefix>:{<queue>}:ready  LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease  ZSET stored message in flight, score = lease deadline (unix ms)
-- ARGV[1] max expired leases to reclaim, >= 1
-- Reply: the number of messages requeued.

return reclaim(KEYS[1], KEYS[2], now_ms(), tonumber(ARGV[1]))
