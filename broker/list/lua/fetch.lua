-- fetch.lua: lease up to ARGV[1] messages of one queue to a consumer.
-- Before popping it hands messages whose lease ran out back to the front of
-- ready (counting a recovery), or to the discard list when that recovery would reach the
-- poison cap ARGV[5] (see reclaim in lib.lua), all bounded so that one call
-- stays short. Each message leased gets the receipt
-- "<ARGV[7]>,<len(id)>:<id>" (see lib.lua), or, when two messages of the
-- batch share an ID, "<ARGV[7]>.<k>,<len(id)>:<id>" for the k-th: a lease
-- ZSET member and an inflight HASH field whose value is the message as
-- popped, unchanged. A message on its last chance (its recoveries one short
-- of the poison cap ARGV[5], when that is 2 or more: broker.IsLastChance)
-- is leased alone, and ends the batch: if it is poison, the messages
-- fetched with it must not die with it and count a recovery too; the rest
-- go back to the front of ready, in order. Messages with fewer recoveries
-- (a crash's innocent victims, mostly) are leased in batches like any, so
-- a fleet recovers at full speed; a poison message among them takes its
-- batch down with it until its recoveries reach the last chance.
--
-- KEYS[1] <prefix>:{<queue>}:ready         LIST of stored messages; LPUSH in, RPOP out
-- KEYS[2] <prefix>:{<queue>}:lease         ZSET receipt of a delivery in flight,
--                                          score = lease deadline (unix ms)
-- KEYS[3] <prefix>:{<queue>}:inflight      HASH receipt -> stored message
-- KEYS[4] <prefix>:{<queue>}:dead          LIST of discard records
-- KEYS[5] <prefix>:{<queue>}:dead_dropped  STRING count of records the discard count cap trimmed
-- KEYS[6] <prefix>:{<queue>}:dead_expired  STRING count of records the discard age limit trimmed
-- KEYS[7] <prefix>:{<queue>}:reclaimed     ZSET receipt of a lease a reclaim took, score = when
--                                          (unix ms); written only when a lease is reclaimed
-- KEYS[8] <prefix>:{<queue>}:wake          ZSET wake signal (see lib.lua): set when ready still
--                                          holds messages after this call, deleted when empty
-- KEYS[9] <prefix>:{<queue>}:canceled      ZSET receipt of a cancelled delivery (internal/cancels):
--                                          read only when a lease is reclaimed
-- KEYS[10..13] the queue's group keys (internal/groups): touched only when a
--          reclaimed job ends (poison, cancelled) and the queue has groups
-- KEYS[14..19] the queue's limit keys (internal/limits): the limits read
--          (one HGETALL) when the call pops messages; a message over a limit
--          waits in its line instead of being leased, the others take their
--          slots; a reclaimed lease gives its slots back
-- ARGV[1] max messages to lease, >= 1
-- ARGV[2] visibility timeout, ms
-- ARGV[3] max expired leases to reclaim
-- ARGV[4] max discard records kept, >= 1
-- ARGV[5] poison cap: the recovery count at which an expired lease's message
--         is discarded instead of handed back; <= 0 turns the cap off
-- ARGV[6] max age of discard records, ms (<= 0: no age limit)
-- ARGV[7] fetch token "<consumer>.<fetch>", new on every call
-- Reply: {deadline (unix ms), hint (ms), reclaimed, poisoned, malformed,
-- placed, more, v1, ..., vn}: more is 1 when ready still holds messages
-- (the call set the wake signal, so that the next idle consumer takes
-- them: a chain of wake-ups, one per batch), else 0; vi are the leased messages, placed is 1 when their
-- receipts name their places k (IDs shared in the batch), else 0 (the
-- caller builds each receipt from ARGV[7] and vi as this script does);
-- reclaimed counts the expired leases this call handed back to ready,
-- poisoned those it moved to the discard list as poison, malformed the
-- popped values it moved there because it cannot read their header (with
-- reason MALFORMED; the caller logs them). When n is 0, hint is the time until
-- the next lease runs out (-1: none), so the caller can bound its blocking
-- wait. Timers are not this script's business: a promoter moves them to
-- ready (internal/timers), which wakes a blocked consumer.

local ready, lease, inflight = KEYS[1], KEYS[2], KEYS[3]

-- MALFORMED is the discard reason of a value that is no stored message
-- (internal/codec's ErrMalformed and what is wrong).
local MALFORMED = 'conveyor: malformed stored message: unreadable header'
-- HEAD is the number of fields of the reply before the leased values.
local HEAD = 7

-- back_from pushes vs[from], ..., vs[#vs] back to the front of ready, in
-- order.
local function back_from(vs, from)
  local back = {}
  for j = #vs, from, -1 do
    back[#back + 1] = vs[j]
  end
  bulk('RPUSH', ready, back)
end

local max, vt = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()

local dl = discard_list(KEYS[4], KEYS[5], KEYS[6], ARGV[4], ARGV[6])
local reclaimed, poisoned = reclaim(ready, lease, inflight, KEYS[7], KEYS[9], dl, tonumber(ARGV[5]), now, tonumber(ARGV[3]), group_keys(10), limit_keys(14), KEYS[8])

local deadline = now + vt
-- Scores go to ZADD as strings: Redis formats a Lua number argument with
-- printf("%.17g"), once per member; this formats it once per call.
local score = tostring(deadline)
local token = ARGV[7]
-- lastrec: the recoveries of a message on its last chance (nil: none is).
local lastrec
if tonumber(ARGV[5]) >= 2 then
  lastrec = tonumber(ARGV[5]) - 1
end
local out = {deadline, -1, reclaimed, poisoned, 0, 0, 0}
local vs = redis.call('RPOP', ready, max)
-- kept[i] is set once vs[i] is stored again (discarded, pushed back or
-- leased). Until then it lives only in this script, and Redis keeps the
-- RPOP of a script that fails later (a key of the wrong type, a command
-- the ACL refuses): so a failure pushes what is not kept back to the
-- front of ready before it is raised, and nothing popped is lost.
local kept = {}
local function lease_popped()
  -- Counters, not #t: the length operator is a search in Lua 5.1.
  local lv, lr, li, n = {}, {}, {}, 0
  local head = token .. ','
  for i = 1, #vs do
    local v = vs[i]
    -- No rewrite of v: a new string per message is a copy, a hash of all
    -- of its bytes (Redis's Lua) and garbage to collect: 13% of the Redis
    -- instructions per job (callgrind) when fetch bumped deliveries itself.
    -- The receipt is short: the token and "<len(id)>:<id>", cut from v;
    -- the place k is left out unless needed (formatting a number costs
    -- more than the rest of the receipt).
    local rec, pos, idlen = string.match(v, LEASED)
    if not rec then
      discard(dl, now, MALFORMED, v)
      kept[i] = true
      out[5] = out[5] + 1
    elseif rec ~= '0' and lastrec and tonumber(rec) >= lastrec and n > 0 then
      -- A message on its last chance is leased alone: if it is poison,
      -- the jobs fetched with it must not die with it and be counted as
      -- recovered too. It and the rest go back to the front, in order.
      back_from(vs, i)
      for j = i, #vs do
        kept[j] = true
      end
      break
    else
      n = n + 1
      lv[n], li[n] = v, i
      lr[n] = head .. string.sub(v, pos, pos + #idlen + tonumber(idlen))
      if rec ~= '0' and lastrec and tonumber(rec) >= lastrec then
        back_from(vs, i + 1)
        for j = i + 1, #vs do
          kept[j] = true
        end
        break
      end
    end
  end
  -- Concurrency limits (internal/limits): a message over a limit waits in
  -- its line instead of being leased, the others take their slots. One
  -- HGETALL when the queue has none, and then no per-message work.
  local L = limit_keys(14)
  local cfg = limit_config(L)
  local ok, holds
  if cfg then
    ok, holds = limit_take(L, cfg, lv)
  end
  -- zadd holds score, receipt pairs and hset receipt, message pairs: the
  -- k-th leased message is at 2k - 1 and 2k of both.
  local zadd, hset, held, m, no = {}, {}, {}, 0, HEAD
  for i = 1, n do
    if ok and not ok[i] then
      kept[li[i]] = true -- limit_take put it in its line
    else
      local r = lr[i]
      m = m + 2
      zadd[m - 1], zadd[m] = score, r
      hset[m - 1], hset[m] = r, lv[i]
      no = no + 1
      out[no] = lv[i]
      if holds then
        held[m / 2] = holds[i]
      end
    end
  end
  -- ZADD counts the members it added: fewer than the messages leased
  -- means two share an ID (the token is new, so no member is there
  -- already), and only then does each receipt name its place: a number
  -- formatted per message is otherwise paid on every fetch.
  local added = 0
  for i = 1, m, CHUNK do
    added = added + redis.call('ZADD', lease, unpack(zadd, i, math.min(i + CHUNK - 1, m)))
  end
  if added < m / 2 then
    local names = {}
    for k = 1, m / 2 do
      names[k] = zadd[2 * k]
    end
    bulk('ZREM', lease, names)
    for k = 1, m / 2 do
      local r = token .. '.' .. k .. string.sub(names[k], #token + 1)
      zadd[2 * k], hset[2 * k - 1] = r, r
    end
    bulk('ZADD', lease, zadd)
    out[6] = 1
  end
  bulk('HSET', inflight, hset)
  for i = 1, n do
    kept[li[i]] = true
  end
  if holds and m > 0 then
    local rs = {}
    for k = 1, m / 2 do
      rs[k] = zadd[2 * k]
    end
    limit_hold(L, rs, held, m / 2)
  end
end
if vs then
  local done, err = pcall(lease_popped)
  if not done then
    local back = {}
    for j = #vs, 1, -1 do
      if not kept[j] then
        back[#back + 1] = vs[j]
      end
    end
    bulk('RPUSH', ready, back)
    error(err, 0) -- Redis adds where the script stopped
  end
end

-- Fewer than max popped: ready is empty, and a signal left by a store no
-- idle consumer waited for would only wake one for nothing (and outlive
-- the queue's other keys). Else (or when a last-chance message put the rest
-- back) the next idle consumer is woken if messages are left.
if (vs and (#vs == max or #out - HEAD < #vs)) and redis.call('LLEN', ready) > 0 then
  wake(KEYS[8])
  out[7] = 1
else
  redis.call('DEL', KEYS[8])
end

if #out == HEAD then
  local nl = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
  if nl[2] then
    out[2] = math.max(0, tonumber(nl[2]) - now)
  end
end
return out
