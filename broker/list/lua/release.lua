-- release.lua: hand a batch of deliveries back to the FRONT of ready, in
-- their order, without counting an attempt or a recovery: for a worker that
-- stops before running them, and for a fetch whose reply was lost (the
-- consumer finds its receipts by its fetch token). Fenced like ack.lua.
-- deliveries+1, for the next delivery (lib.lua). A delivery whose job was
-- cancelled (internal/cancels) is not handed back: its job is removed, as
-- an ack removes it, and its mark with it.
--
-- KEYS[1] <prefix>:{<queue>}:ready     LIST of stored messages
-- KEYS[2] <prefix>:{<queue>}:lease     ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:inflight  HASH receipt -> stored message
-- KEYS[4] <prefix>:{<queue>}:reclaimed ZSET receipt of a lease a reclaim took, score = when (unix ms); see lib.lua
-- KEYS[5] <prefix>:{<queue>}:wake      ZSET wake signal (see lib.lua), set when messages went back
-- KEYS[6] <prefix>:{<queue>}:canceled  ZSET receipt of a cancelled delivery (internal/cancels)
-- KEYS[7..10] the queue's group keys (internal/groups): a cancelled job
--   that ends here lets the next of its group in
-- KEYS[11..16] the queue's limit keys (internal/limits): the deliveries'
--          slots are given back
-- ARGV[k] for k >= 1: the receipt of delivery k
-- Reply: {k, status, ...} for each receipt k that was not released (status
-- "LEASE_LOST" or "GONE", as for ack.lua); empty when all were.

local ready, lease, inflight = KEYS[1], KEYS[2], KEYS[3]
-- The messages are read first: take forgets them. A read, before any
-- write, is allowed when Redis is full.
local vs = messages(inflight, ARGV)
-- So are the other keys read between take and the RPUSH: Redis keeps what
-- a script wrote before a command of it failed, so a key of another type
-- (written by hand) must fail the call before take, not after it, when
-- the messages would be in neither the lease nor ready. (take's ZSCORE of
-- the record is tried here for the same reason.)
local canceled = canceled_among(KEYS[6], ARGV)
redis.call('ZSCORE', KEYS[4], '')
redis.call('LLEN', ready)
local oks, at, lost = take(lease, inflight, KEYS[4], ARGV)
-- RPUSH the last first, so the first of the batch is fetched next.
local back, ended = {}, {}
for i = #oks, 1, -1 do
  local v = vs[at and at[i] or i]
  if canceled[oks[i]] then
    redis.call('ZREM', KEYS[6], oks[i])
    ended[#ended + 1] = v
    v = nil
  end
  -- every lease has its message, and every message parses, unless written
  -- by hand (see reclaim)
  if v then
    local d, a, r, _, tail = parse(v)
    back[#back + 1] = d and build(d + 1, a, r, tail) or v
  end
end
if #back > 0 then
  bulk('RPUSH', ready, back)
  wake(KEYS[5])
end
limit_release(limit_keys(11), ready, KEYS[5], oks)
group_end_push(group_keys(7), ended, ready, 'list', nil, KEYS[5])
return lost
