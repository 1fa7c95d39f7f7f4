-- expire.lua: one bounded step of age retention on a queue's discard list:
-- drops the records older than the maximum age from its oldest end (see
-- discard_expire in lib.lua). The Go side repeats it while a step drops as
-- many as it may.
--
-- KEYS[1] <prefix>:{<queue>}:dead          LIST of discard records, newest first
-- KEYS[2] <prefix>:{<queue>}:dead_expired  STRING count of records dropped for age
-- ARGV[1] max age, ms (<= 0: no age limit)
-- Reply: how many records this step dropped (at most 100).

return discard_expire(KEYS[1], KEYS[2], ARGV[1], now_ms())
