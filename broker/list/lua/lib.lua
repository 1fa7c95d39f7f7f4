-- lib.lua: helpers shared by the list driver's scripts. The Go side puts
-- internal/timers' lib.lua (now_ms, bulk, the timer helpers) and then this
-- text in front of each script (see scripts.go), so every script still runs
-- as one self-contained EVAL; the helpers are locals, as Redis 7 forbids
-- script globals.
--
-- A stored message is "1,<deliveries>,<attempt>,<recoveries>,<len(id)>:<id><body>"
-- (internal/codec). Scripts read and rewrite the header with string patterns
-- only, so they run on miniredis (gopher-lua) too.
--
-- A delivery is named by its receipt "<token>,<len(id)>:<id>": token is
-- "<consumer>.<fetch>", the consumer's random name (60 hex digits, so that
-- every receipt is over 64 bytes: see randomName in consumer.go) and its
-- count of fetches in base 36, sent by the consumer with each fetch, or
-- "<consumer>.<fetch>.<k>", k the delivery's place in the batch, when two
-- messages of that fetch share an ID. The consumer makes the token,
-- not Redis, so it is new on every fetch even when a failover made Redis
-- forget earlier ones. The receipt is the delivery's member of the lease
-- ZSET and its field in the inflight HASH, whose value is the stored
-- message: every script that adds, moves or removes one does the same to
-- the other. deliveries still counts deliveries (a message waiting in ready
-- or delayed carries the count its next delivery will have; reclaim, retry
-- and release increment it) but fences nothing.
--
-- KEYS, ARGV, reply: none of its own; see each script.

local HEADER = '^1,(%d+),(%d+),(%d+),(%d+):'
-- The hot path reads only what it needs: a whole header, capturing
-- recoveries, where "<len(id)>:" starts and len(id).
local LEASED = '^1,%d+,%d+,(%d+),()(%d+):'

-- parse returns deliveries, attempt and recoveries (decimal strings), the id,
-- and the tail "<len(id)>:<id><body>" that a rewrite keeps as it is; nil when
-- v is not a stored message.
local function parse(v)
  local _, e, d, a, r, n = string.find(v, HEADER)
  if not e then
    return nil
  end
  local idlen = tonumber(n)
  return d, a, r, string.sub(v, e + 1, e + idlen), string.sub(v, e - #n)
end

-- build joins a header and a tail from parse. Counters may be numbers:
-- Lua prints integers below 1e14 without exponent or fraction.
local function build(d, a, r, tail)
  return '1,' .. d .. ',' .. a .. ',' .. r .. ',' .. tail
end

-- wake adds the member of the queue's wake signal, ZSET key (see
-- internal/wake): one idle consumer wakes to fetch what was just pushed to
-- ready.
local function wake(key)
  redis.call('ZADD', key, 0, 'w')
end

-- scored returns the ZADD arguments {score, ms[1], score, ms[2], ...}
-- that give each member of the list ms the score score. The score goes as a
-- string, formatted once: Redis formats a Lua number argument with
-- printf("%.17g"), once per member.
local function scored(score, ms)
  local t = tostring(score)
  local a = {}
  for i = 1, #ms do
    a[#a + 1] = t
    a[#a + 1] = ms[i]
  end
  return a
end

-- discard keeps v in the discard list dl (discard_list in internal/discards'
-- lib.lua) as a record "d1,<unix ms>,<len(reason)>:<reason><v>"
-- (internal/codec), then enforces its retention by age and by count,
-- counting what each dropped, so retention is bounded and visible.
local function discard(dl, now, reason, v)
  discard_push(dl, now, reason, v)
end

-- poison_reason is the discard reason of a message whose lease ran out the
-- n-th time and that the cap stops there (broker.PoisonReason starts it).
local function poison_reason(n)
  return 'conveyor: poison: lease expired ' .. n .. ' times'
end

-- messages returns the stored messages of receipts rs (a list) from the
-- inflight HASH, in order; false for one it does not hold.
local function messages(inflight, rs)
  local vs = {}
  for i = 1, #rs, CHUNK do
    local part = redis.call('HMGET', inflight, unpack(rs, i, math.min(i + CHUNK - 1, #rs)))
    for j = 1, #part do
      vs[#vs + 1] = part[j]
    end
  end
  return vs
end

-- lost_status is the status of a settle of receipt r whose lease is gone:
-- 'LEASE_LOST' when a reclaim took it (the record rec holds it: the lease
-- ran out before any settle ended it), else 'GONE': a settle ended it (an
-- earlier one, whose reply the caller may have lost), or it never was (a
-- receipt a failover made Redis forget, or the record forgot, past its
-- bounds). Paid only when a lease is gone.
local function lost_status(rec, r)
  if was_reclaimed(rec, r) then
    return 'LEASE_LOST'
  end
  return 'GONE'
end

-- reclaim takes up to limit leases that ran out by now off the lease ZSET
-- and their messages off the inflight HASH, earliest deadline first,
-- counting a recovery on each. A crash recovery is not a handler failure:
-- attempt stays as it is.
--
-- A message whose recoveries would reach maxrec (maxrec > 0) is poison: it
-- took its worker down maxrec times, so it goes to the discard list dl (as
-- for discard) as the stored message with recoveries+1,
-- deliveries kept at its last delivery's count as discard.lua keeps it. The
-- others go back to the FRONT of ready, deliveries+1 for the next delivery.
--
-- The receipts taken go into the record rec (see remember_reclaimed), so
-- that a settle that finds its lease gone can tell a reclaim from an
-- earlier settle (lost_status).
--
-- A delivery whose job was cancelled (its receipt is in the marks ZSET
-- marks, see internal/cancels) is removed, its mark with it: its holder
-- died before ending it.
--
-- A job that ends here (poison or cancelled) lets the next job of its
-- group in, at the back of ready (group keys G, internal/groups). Every
-- lease taken gives back its concurrency limit slots (limit keys L,
-- internal/limits), letting waiting jobs in at the front of ready and
-- setting the wake signal wk.
--
-- It returns how many went back to ready and how many were discarded. The
-- lease ZSET is read and changed in this one script, so two reapers running
-- at once can never move one message twice.
local function reclaim(ready, lease, inflight, rec, marks, dl, maxrec, now, limit, G, L, wk)
  local rs = redis.call('ZRANGEBYSCORE', lease, '-inf', now, 'LIMIT', 0, limit)
  if #rs == 0 then
    return 0, 0
  end
  -- Redis keeps what a script wrote before a command of it failed, so
  -- everything is read and worked out before the leases are taken, and the
  -- messages are stored again before anything else is written: a key of
  -- another type (written by hand) fails the call with the leases still
  -- in place rather than with their messages in neither place.
  local vs = messages(inflight, rs)
  local canceled = canceled_among(marks, rs)
  local ended, back, poison = {}, {}, {}
  for i = 1, #vs do
    local v = vs[i]
    if canceled[rs[i]] then
      ended[#ended + 1] = v
      v = false
    end
    -- Every lease has its message unless someone wrote the keys by hand;
    -- a lease without one has nothing to recover.
    if v then
      local d, a, r, _, tail = parse(v)
      -- fetch leases only values that parse, so d is set unless someone
      -- wrote the HASH by hand; then v goes back as it is, and fetch
      -- moves it to the discard list, where an operator can see it.
      if d then
        local n = r + 1
        if maxrec > 0 and n >= maxrec then
          poison[#poison + 1] = {n, build(d, a, n, tail)}
          ended[#ended + 1] = v
          v = nil
        else
          v = build(d + 1, a, n, tail)
        end
      end
      if v then
        back[#back + 1] = v
      end
    end
  end
  if #poison > 0 then
    redis.call('LLEN', dl.dead) -- fails here, not after the take
  end
  redis.call('ZSCORE', rec, '') -- the same for remember_reclaimed
  redis.call('LLEN', ready) -- and for the push back
  bulk('ZREM', lease, rs)
  bulk('HDEL', inflight, rs)
  -- RPUSH the last first, so the first of vs is fetched next.
  local rev = {}
  for i = #back, 1, -1 do
    rev[#rev + 1] = back[i]
  end
  bulk('RPUSH', ready, rev)
  for _, p in ipairs(poison) do
    discard(dl, now, poison_reason(p[1]), p[2])
  end
  if next(canceled) then
    for i = 1, #rs do
      if canceled[rs[i]] then
        redis.call('ZREM', marks, rs[i])
      end
    end
  end
  remember_reclaimed(rec, now, rs)
  local poisoned = #poison
  group_end_push(G, ended, ready, 'list', nil, nil)
  local vs, admit = collect()
  limit_end(L, rs, admit)
  limit_push(ready, 'list', nil, wk, vs)
  return #back, poisoned
end

-- The batch scripts (ack, release, extend) name each delivery by its
-- receipt only: the receipt holds the delivery's token, and the driver
-- checks that a delivery's Token is its receipt's before sending it
-- (checkDelivery), so the script need not: a receipt alone is the fenced
-- name of one delivery.

-- settle_check looks up each receipt in ARGV from index first: it holds its
-- lease while the receipt is a member of the lease ZSET (a reclaimed and
-- re-fetched message is another member, with another token). It returns
-- the receipts that hold and the reply list {receipt number, 'LEASE_LOST',
-- ...} of those that do not. It changes nothing: for extend, which keeps
-- the leases.
local function settle_check(lease, first)
  local oks, lost = {}, {}
  for i = first, #ARGV, CHUNK do
    local hi = math.min(i + CHUNK - 1, #ARGV)
    local scores = redis.call('ZMSCORE', lease, unpack(ARGV, i, hi))
    for j = i, hi do
      if scores[j - i + 1] then
        oks[#oks + 1] = ARGV[j]
      else
        lost[#lost + 1] = j - first + 1
        lost[#lost + 1] = 'LEASE_LOST'
      end
    end
  end
  return oks, lost
end

-- take ends the lease of each receipt in rs that still holds it (as
-- settle_check tells), and forgets its message in the inflight HASH. One
-- ZREM of them all is the check when it removes as many members as there
-- are receipts, the usual case: a batch costs three commands, not one per
-- receipt. Otherwise each receipt is checked by its own HDEL, as the
-- inflight HASH holds a field exactly for each lease (the ZREM has ended
-- the leases of those that held), and each that did not hold by the
-- record rec (lost_status). It returns the receipts taken, their numbers
-- in rs (nil when all were taken) and the reply list {receipt number,
-- status, ...} of the others, status 'LEASE_LOST' or 'GONE' (a receipt
-- named twice is taken once, then reported gone).
local function take(lease, inflight, rec, rs)
  local removed = 0
  for i = 1, #rs, CHUNK do
    removed = removed + redis.call('ZREM', lease, unpack(rs, i, math.min(i + CHUNK - 1, #rs)))
  end
  if removed == #rs then
    bulk('HDEL', inflight, rs)
    return rs, nil, {}
  end
  local oks, okat, lost = {}, {}, {}
  for i = 1, #rs do
    if redis.call('HDEL', inflight, rs[i]) == 1 then
      oks[#oks + 1] = rs[i]
      okat[#okat + 1] = i
    else
      lost[#lost + 1] = i
      lost[#lost + 1] = lost_status(rec, rs[i])
    end
  end
  return oks, okat, lost
end

-- limit_release gives back the concurrency limit slots (limit keys L,
-- internal/limits) of the deliveries with receipts rs, whose leases ended,
-- and puts the jobs that lets in at the front of ready, setting the wake
-- signal wk. One EXISTS when no delivery of the queue holds a slot.
local function limit_release(L, ready, wk, rs)
  local vs, admit = collect()
  limit_end(L, rs, admit)
  limit_push(ready, 'list', nil, wk, vs)
end
