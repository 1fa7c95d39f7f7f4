-- extend.lua: push the lease deadline of a batch of deliveries to now + ttl.
-- Fenced like ack.lua: a lease that was reclaimed is not recreated.
--
-- KEYS[1] <prefix>:{<queue>}:lease  ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- ARGV[1] ttl, ms
-- ARGV[k+1] for k >= 1: the receipt of delivery k
-- Reply: {deadline (unix ms), k, status, ...}: the new deadline, then each
-- receipt k that was not extended (status "LEASE_LOST").

local lease = KEYS[1]
local deadline = now_ms() + tonumber(ARGV[1])
local oks, lost = settle_check(lease, 2)
-- XX: only existing members move; settle_check just saw them all, so this
-- only states that an extension never creates a lease.
bulk('ZADD', lease, scored(deadline, oks), 'XX')
local out = {deadline}
for i = 1, #lost do
  out[#out + 1] = lost[i]
end
return out
