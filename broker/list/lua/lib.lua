-- lib.lua: helpers shared by the list driver's scripts. The Go side puts this
-- text in front of each script (see scripts.go), so every script still runs
-- as one self-contained EVAL; the helpers are locals, as Redis 7 forbids
-- script globals.
--
-- A stored message is "1,<deliveries>,<attempt>,<recoveries>,<len(id)>:<id><body>"
-- (internal/codec). Scripts read and rewrite the header with string patterns
-- only, so they run on miniredis (gopher-lua) too. deliveries is the fencing
-- token: fetch increments it, and every settle compares it with the token
-- the consumer holds.
--
-- KEYS, ARGV, reply: none of its own; see each script.

local HEADER = '^1,(%d+),(%d+),(%d+),(%d+):'
-- The hot paths read only what they need: fewer captures, fewer strings.
local TOKEN = '^1,(%d+),'                    -- deliveries
local LEASE = '^1,(%d+),%d+,%d+,(%d+):()'    -- deliveries, len(id), where id starts
local CHUNK = 1000 -- arguments per redis.call; even, so pairs never split

-- now_ms is the server's time in unix milliseconds: one clock for every
-- worker, however skewed theirs are.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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

-- bump returns v with deliveries+1 and its id; nil when v is not a stored
-- message.
local function bump(v)
  local d, n, p = string.match(v, LEASE)
  if not d then
    return nil
  end
  return '1,' .. (d + 1) .. string.sub(v, 3 + #d), string.sub(v, p, p + n - 1)
end

-- build joins a header and a tail from parse. Counters may be numbers:
-- Lua prints integers below 1e14 without exponent or fraction.
local function build(d, a, r, tail)
  return '1,' .. d .. ',' .. a .. ',' .. r .. ',' .. tail
end

-- bulk runs cmd on key with the flat argument list a, CHUNK at a time, so a
-- big batch neither overflows unpack nor makes one command per item.
local function bulk(cmd, key, a)
  for i = 1, #a, CHUNK do
    redis.call(cmd, key, unpack(a, i, math.min(i + CHUNK - 1, #a)))
  end
end

-- hmget returns the values of fields ids of hash key (false when absent),
-- CHUNK fields per HMGET.
local function hmget(key, ids)
  local out = {}
  for i = 1, #ids, CHUNK do
    local vs = redis.call('HMGET', key, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #vs do
      out[#out + 1] = vs[j]
    end
  end
  return out
end

-- discard keeps v in the discard list as a record
-- "d1,<unix ms>,<len(reason)>:<reason><v>" (internal/codec), trims the list to
-- max entries and counts what the trim dropped, so retention is bounded and
-- visible.
local function discard(dead, dropped, max, now, reason, v)
  local n = redis.call('LPUSH', dead, 'd1,' .. now .. ',' .. #reason .. ':' .. reason .. v)
  if n > max then
    redis.call('LTRIM', dead, 0, max - 1)
    redis.call('INCRBY', dropped, n - max)
  end
end

-- requeue hands the in-flight messages ids (with their stored values vs) back
-- to the FRONT of ready, counting a recovery, and forgets their in-flight
-- entries. The first of ids is fetched next. Returns how many moved.
local function requeue(ready, inflight, ids, vs)
  local back, gone = {}, {}
  for i = #ids, 1, -1 do
    local v = vs[i]
    if v then
      local d, a, r, _, tail = parse(v)
      if d then
        v = build(d, a, tonumber(r) + 1, tail)
      end
      -- a malformed value goes back as it is: fetch moves it to the
      -- discard list, where an operator can see it.
      back[#back + 1] = v
      gone[#gone + 1] = ids[i]
    end
  end
  bulk('HDEL', inflight, gone)
  bulk('RPUSH', ready, back)
  return #back
end

-- reclaim requeues up to limit messages whose lease ran out by now. The
-- lease ZSET is read and changed in this one script, so two reapers running
-- at once can never move one message twice.
local function reclaim(ready, inflight, lease, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', lease, '-inf', now, 'LIMIT', 0, limit)
  if #ids == 0 then
    return 0
  end
  bulk('ZREM', lease, ids)
  return requeue(ready, inflight, ids, hmget(inflight, ids))
end

-- settle_check compares the token of each (id, token) pair in ARGV from
-- index first with the deliveries of the in-flight entry. It returns the ids
-- and values that match, their ARGV pair numbers, and the reply list
-- {pair number, 'LEASE_LOST', ...} of those that do not.
local function settle_check(inflight, first)
  local ids = {}
  for i = first, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
  end
  local vs = hmget(inflight, ids)
  local okids, okvs, okidx, lost = {}, {}, {}, {}
  for j = 1, #ids do
    local v = vs[j]
    local d = v and string.match(v, TOKEN)
    if d and d == ARGV[first + 2 * j - 1] then
      okids[#okids + 1] = ids[j]
      okvs[#okvs + 1] = v
      okidx[#okidx + 1] = j
    else
      lost[#lost + 1] = j
      lost[#lost + 1] = 'LEASE_LOST'
    end
  end
  return okids, okvs, okidx, lost
end

