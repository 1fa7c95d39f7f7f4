-- extend.lua: push the lease deadline of a batch of deliveries to now + ttl.
-- Fenced like ack.lua: a lease that was reclaimed is not recreated. A
-- delivery whose job was cancelled (its receipt is in the marks ZSET) is
-- extended too, its holder being alive, and reported CANCELED so that the
-- holder stops its handler.
--
-- KEYS[1] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[2] <prefix>:{<queue>}:canceled  ZSET receipt of a cancelled delivery (internal/cancels)
-- ARGV[1] ttl, ms
-- ARGV[k+1] for k >= 1: the receipt of delivery k
-- Reply: {deadline (unix ms), k, status, ...}: the new deadline, then each
-- receipt k that was not extended (status "LEASE_LOST") or was and is
-- cancelled (status "CANCELED").

local lease = KEYS[1]
local deadline = now_ms() + tonumber(ARGV[1])
local oks, lost = settle_check(lease, 2)
-- On a full Redis (maxmemory, noeviction) Redis refuses a script whose
-- first write may take memory, as ZADD may, and lets one whose first write
-- is another kind go on to the end. So the first lease is removed and then
-- every lease set again: settle_check just saw them all, so the ZADD
-- creates none, and a heartbeat keeps its leases on a full Redis.
if #oks > 0 then
  redis.call('ZREM', lease, oks[1])
end
bulk('ZADD', lease, scored(deadline, oks))
local out = {deadline}
for i = 1, #lost do
  out[#out + 1] = lost[i]
end
local marked = canceled_among(KEYS[2], oks)
if next(marked) then
  for i = 2, #ARGV do
    if marked[ARGV[i]] then
      out[#out + 1] = i - 1
      out[#out + 1] = 'CANCELED'
    end
  end
end
return out
