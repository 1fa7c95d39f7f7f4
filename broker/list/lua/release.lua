-- release.lua: hand a batch of deliveries back to the FRONT of ready, in
-- their order, without counting an attempt or a recovery: for a worker that
-- stops before running them. Fenced like ack.lua. deliveries+1, for the next
-- delivery (lib.lua), so the released tokens never match again.
--
-- KEYS[1] <prefix>:{<queue>}:ready  LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease  ZSET stored message in flight, score = lease deadline (unix ms)
-- ARGV[k] for k >= 1: stored message (the delivery's receipt)
-- Reply: {k, status, ...} for each receipt k that was not released (status
-- "LEASE_LOST"); empty when all were.

local ready, lease = KEYS[1], KEYS[2]
local oks, lost = take(lease, 1)
-- RPUSH the last first, so the first of the batch is fetched next.
local back = {}
for i = #oks, 1, -1 do
  local v = oks[i]
  local d, a, r, _, tail = parse(v)
  -- every lease member parses unless written by hand (see reclaim)
  back[#back + 1] = d and build(d + 1, a, r, tail) or v
end
bulk('RPUSH', ready, back)
return lost
