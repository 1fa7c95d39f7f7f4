-- internal/limits lib.lua: fleet-wide concurrency limits, shared by the list
-- and stream drivers' scripts. It comes after internal/timers' lib (bulk,
-- CHUNK) and internal/groups' lib (group_message_id). Helpers are locals, as
-- Redis 7 forbids script globals.
--
-- A queue may cap how many of its jobs run at once across the fleet, and
-- how many of each kind. A job takes a slot of each limit that applies when
-- a consumer fetches it and gives them back when its delivery ends: ack,
-- discard, retry, postpone, release, cancel, or a reclaim of its expired
-- lease (its holder died), so a dead worker's slots come back with its
-- leases. A fetched job that finds a limit full is not delivered: it waits
-- in that limit's line, outside the queue, without counting an attempt, and
-- a delivery that gives a slot back lets the next one in.
--
-- A limit is named by a class: a job kind, or "" for the queue as a whole.
--
-- Keys (all under the queue's hash tag), taken as a table L from
-- limit_keys(first), KEYS[first] .. KEYS[first + 5]:
--   max    HASH class -> the limit (a decimal >= 1); the configuration
--   state  HASH class -> "<held>,<last seq>": slots held, the line's last
--          sequence number; present while a slot is held or a job waits
--   of     HASH holder -> "<q><kind>": the slots a delivery holds (q "1"
--          when it holds a slot of the queue's limit, "0" when not; kind
--          empty when it holds no kind slot). A holder names a delivery:
--          the list driver's receipt, the stream driver's entry ID
--   wait   ZSET member "<len(class)>:<class><seq, 16 digits>", score 0:
--          every line, each in the order its jobs came (a lex range)
--   msgs   HASH member -> stored message of a waiting job
--   jobs   HASH job ID -> member, of a waiting job (to cancel or find it)
--
-- KEYS, ARGV, reply: none of its own; see each script.

local function limit_keys(first)
  return {max = KEYS[first], state = KEYS[first + 1], of = KEYS[first + 2],
    wait = KEYS[first + 3], msgs = KEYS[first + 4], jobs = KEYS[first + 5]}
end

-- limit_kind returns the kind of stored message v (internal/codec: after
-- "<len(id)>:<id>" the body starts with the kind's length, a uvarint of one
-- or two bytes, as a kind is at most 128 bytes, then the kind); nil when v
-- does not parse.
local function limit_kind(v)
  local pos, n = string.match(v, '^1,%d+,%d+,%d+,()(%d+):')
  if not pos then
    return nil
  end
  local k = pos + #n + 1 + tonumber(n)
  local b = string.byte(v, k)
  if not b then
    return nil
  end
  if b >= 128 then
    local b2 = string.byte(v, k + 1)
    if not b2 then
      return nil
    end
    b = b - 128 + b2 * 128
    k = k + 1
  end
  return string.sub(v, k + 1, k + b)
end

-- limit_config returns the queue's limits as a table class -> number, nil
-- when it has none: one HGETALL.
local function limit_config(L)
  local flat = redis.call('HGETALL', L.max)
  if #flat == 0 then
    return nil
  end
  local cfg = {}
  for i = 1, #flat, 2 do
    cfg[flat[i]] = tonumber(flat[i + 1])
  end
  return cfg
end

-- limit_parse reads a class's state s (nil: none) into slots held and the
-- line's last sequence number.
local function limit_parse(s)
  local h, q
  if s then
    h, q = string.match(s, '^(%d+),(%d+)$')
  end
  if not h then
    return 0, 0
  end
  return tonumber(h), tonumber(q)
end

-- limit_states reads the states of the classes cs (a list) into a table
-- class -> {held, seq}.
local function limit_states(L, cs)
  local st = {}
  for i = 1, #cs, CHUNK do
    local part = {unpack(cs, i, math.min(i + CHUNK - 1, #cs))}
    local vals = redis.call('HMGET', L.state, unpack(part))
    for j = 1, #part do
      local h, q = limit_parse(vals[j])
      st[part[j]] = {h, q}
    end
  end
  return st
end

-- limit_line_empty tells whether class c's line holds no job. A line's
-- members are laid out as a FIFO group's (group_line gives their range).
local function limit_line_empty(L, c)
  local lo, hi = group_line(c)
  return redis.call('ZLEXCOUNT', L.wait, lo, hi) == 0
end

-- limit_save writes the states st of the classes cs back: a class with no
-- slot held and nothing waiting has none. empty(c) tells whether c's line
-- is empty.
local function limit_save(L, cs, st, empty)
  local keep, drop = {}, {}
  for i = 1, #cs do
    local c = cs[i]
    local s = st[c]
    if s[1] == 0 and empty(c) then
      drop[#drop + 1] = c
    else
      keep[#keep + 1] = c
      keep[#keep + 1] = s[1] .. ',' .. s[2]
    end
  end
  bulk('HSET', L.state, keep)
  bulk('HDEL', L.state, drop)
end

-- limit_take decides, for a fetch, which of the stored messages vs (a
-- list) may run under the queue's limits cfg (from limit_config; nil: all
-- may). It returns a list ok, ok[i] true for a message that runs and holds
-- its slots (give it to limit_hold with its holder), false for one that
-- waits: it is put at the end of the line of the first limit it finds full
-- (the queue's, then its kind's), and its job indexed by ID. A message
-- that does not parse runs: the caller deals with it.
local function limit_take(L, cfg, vs)
  local ok, kinds = {}, {}
  for i = 1, #vs do
    ok[i] = true
  end
  if not cfg then
    return ok, {}
  end
  local cs, seen = {}, {}
  local function see(c)
    if not seen[c] then
      seen[c] = true
      cs[#cs + 1] = c
    end
  end
  local qmax = cfg['']
  if qmax then
    see('')
  end
  for i = 1, #vs do
    local k = limit_kind(vs[i])
    kinds[i] = k
    if k and cfg[k] then
      see(k)
    end
  end
  if #cs == 0 then
    return ok, {}
  end
  local st = limit_states(L, cs)
  local parked, index = {}, {}
  for i = 1, #vs do
    local k = kinds[i]
    local full
    if qmax and st[''][1] >= qmax then
      full = ''
    elseif k and cfg[k] and st[k][1] >= cfg[k] then
      full = k
    end
    if full then
      local s = st[full]
      s[2] = s[2] + 1
      local m = #full .. ':' .. full .. string.format('%016d', s[2])
      parked[#parked + 1] = m
      parked[#parked + 1] = vs[i]
      local id = group_message_id(vs[i])
      if id then
        index[#index + 1] = id
        index[#index + 1] = m
      end
      ok[i] = false
    else
      if qmax then
        st[''][1] = st[''][1] + 1
      end
      if k and cfg[k] then
        st[k][1] = st[k][1] + 1
      else
        kinds[i] = ''
      end
    end
  end
  local zadd = {}
  for i = 1, #parked, 2 do
    zadd[#zadd + 1] = 0
    zadd[#zadd + 1] = parked[i]
  end
  bulk('ZADD', L.wait, zadd)
  bulk('HSET', L.msgs, parked)
  bulk('HSET', L.jobs, index)
  -- A class this call touched holds a slot or has a job waiting, but a
  -- kind whose job waits in the queue's line: its line may be empty.
  limit_save(L, cs, st, function(c) return limit_line_empty(L, c) end)
  -- kinds[i]: the kind slot message i took ('' none), for limit_hold.
  local q = qmax and '1' or '0'
  local holds = {}
  for i = 1, #vs do
    if ok[i] then
      holds[i] = q .. (kinds[i] or '')
    end
  end
  return ok, holds
end

-- limit_hold records that holder hs[i] holds the slots holds[i] (from
-- limit_take; nil or "0": none), for i = 1 .. n.
local function limit_hold(L, hs, holds, n)
  local a = {}
  for i = 1, n do
    if holds[i] and holds[i] ~= '0' then
      a[#a + 1] = hs[i]
      a[#a + 1] = holds[i]
    end
  end
  bulk('HSET', L.of, a)
end

-- LET_IN_MAX bounds the jobs one call lets in of a line: the rest go with
-- later calls.
local LET_IN_MAX = 1000

-- limit_let_in lets up to n jobs of class c's line in, oldest first,
-- handing each stored message to admit(v). It returns how many.
local function limit_let_in(L, c, n, admit)
  n = math.min(n, LET_IN_MAX)
  if n <= 0 then
    return 0
  end
  local lo, hi = group_line(c)
  local ms = redis.call('ZRANGEBYLEX', L.wait, lo, hi, 'LIMIT', 0, n)
  if #ms == 0 then
    return 0
  end
  local vs = redis.call('HMGET', L.msgs, unpack(ms))
  local ids, gone = {}, {}
  for i = 1, #ms do
    local v = vs[i]
    -- Every member has its message unless someone wrote the keys by hand.
    if v then
      admit(v)
      local id = group_message_id(v)
      if id then
        ids[#ids + 1] = id
      end
    end
  end
  if #ids > 0 then
    -- A job ID is unindexed only when it names this member: another job
    -- under the same ID may wait too.
    local cur = redis.call('HMGET', L.jobs, unpack(ids))
    local set = {}
    for i = 1, #ms do
      set[ms[i]] = true
    end
    for i = 1, #ids do
      if cur[i] and set[cur[i]] then
        gone[#gone + 1] = ids[i]
      end
    end
  end
  bulk('ZREM', L.wait, ms)
  bulk('HDEL', L.msgs, ms)
  bulk('HDEL', L.jobs, gone)
  return #ms
end

-- limit_fill lets in, for each class of cs (states st, limits cfg), as
-- many waiting jobs as its limit has room for (a removed limit: up to
-- LET_IN_MAX), handing each to admit(v), then writes the states back. It
-- returns how many it let in.
local function limit_fill(L, cfg, cs, st, admit)
  local let, empty = 0, {}
  for i = 1, #cs do
    local c = cs[i]
    local room = LET_IN_MAX
    if cfg[c] then
      room = math.min(room, cfg[c] - st[c][1])
    end
    local n = limit_let_in(L, c, room, admit)
    -- Fewer than asked: the line is empty, no need to look.
    empty[c] = n < room
    let = let + n
  end
  limit_save(L, cs, st, function(c) return empty[c] or limit_line_empty(L, c) end)
  return let
end

-- limit_end gives back the slots the deliveries hs (a list of holders)
-- hold, and lets in the next waiting jobs of each limit with room, handing
-- each stored message to admit(v). One EXISTS when no delivery holds a
-- slot. It returns the number of holders that held slots.
local function limit_end(L, hs, admit)
  if #hs == 0 or redis.call('EXISTS', L.of) == 0 then
    return 0
  end
  local cs, dec, done = {}, {}, {}
  local function give(c)
    if not dec[c] then
      dec[c] = 0
      cs[#cs + 1] = c
    end
    dec[c] = dec[c] + 1
  end
  for i = 1, #hs, CHUNK do
    local part = {unpack(hs, i, math.min(i + CHUNK - 1, #hs))}
    local vals = redis.call('HMGET', L.of, unpack(part))
    for j = 1, #part do
      local s = vals[j]
      if s then
        done[#done + 1] = part[j]
        if string.sub(s, 1, 1) == '1' then
          give('')
        end
        if #s > 1 then
          give(string.sub(s, 2))
        end
      end
    end
  end
  if #done == 0 then
    return 0
  end
  bulk('HDEL', L.of, done)
  local st = limit_states(L, cs)
  for i = 1, #cs do
    local s = st[cs[i]]
    s[1] = math.max(0, s[1] - dec[cs[i]])
  end
  limit_fill(L, limit_config(L) or {}, cs, st, admit)
  return #done
end

-- limit_unwait removes job id from the line it waits in, if it does, and
-- returns its stored message (nil: it does not wait). Of two waiting jobs
-- that share an ID, it finds the one that came last.
local function limit_unwait(L, id)
  local m = redis.call('HGET', L.jobs, id)
  if not m then
    return nil
  end
  local v = redis.call('HGET', L.msgs, m)
  redis.call('ZREM', L.wait, m)
  redis.call('HDEL', L.msgs, m)
  redis.call('HDEL', L.jobs, id)
  local n, rest = string.match(m, '^(%d+):(.*)$')
  if n then
    local c = string.sub(rest, 1, tonumber(n))
    local st = limit_states(L, {c})
    limit_save(L, {c}, st, function() return limit_line_empty(L, c) end)
  end
  return v
end

-- limit_pump lets in, for every limit of the queue with a free slot and a
-- job waiting, as many as it has room for, handing each to admit(v). A job
-- let in takes its slot only when fetched, so one removed from the queue
-- before (a cancel, a purge) leaves a slot that nothing would give back:
-- the scripts that remove ready jobs call this. It returns how many it let
-- in.
local function limit_pump(L, admit)
  local flat = redis.call('HGETALL', L.state)
  if #flat == 0 then
    return 0
  end
  local cs, st = {}, {}
  for i = 1, #flat, 2 do
    cs[#cs + 1] = flat[i]
    st[flat[i]] = {limit_parse(flat[i + 1])}
  end
  return limit_fill(L, limit_config(L) or {}, cs, st, admit)
end

-- limit_set sets class c's limit to n (n <= 0 removes it) and lets in as
-- many waiting jobs as the new limit has room for, less done, the jobs
-- earlier calls of the same change let in (they hold no slot until
-- fetched), at most LET_IN_MAX, handing each to admit(v). It returns how
-- many it let in and how many still wait in c's line.
local function limit_set(L, c, n, done, admit)
  if n > 0 then
    redis.call('HSET', L.max, c, n)
  else
    redis.call('HDEL', L.max, c)
  end
  local st = limit_states(L, {c})
  local room = LET_IN_MAX
  if n > 0 then
    room = math.min(room, n - st[c][1] - done)
  end
  local let = limit_let_in(L, c, room, admit)
  local lo, hi = group_line(c)
  local left = redis.call('ZLEXCOUNT', L.wait, lo, hi)
  limit_save(L, {c}, st, function() return left == 0 end)
  return let, left
end

-- limit_push hands the jobs vs that slots let in back to the queue's ready
-- structure target, in order: mode "list" at the front of the list (they
-- had their turn; the first let in is fetched first), mode "stream"
-- appended to the stream (which has no front; see push_to). It sets the
-- wake signal wk when vs is not empty.
local function limit_push(target, mode, group, wk, vs)
  if mode ~= 'list' then
    push_to(target, mode, group, wk, vs)
    return
  end
  if #vs == 0 then
    return
  end
  local rev = {}
  for i = #vs, 1, -1 do
    rev[#rev + 1] = vs[i]
  end
  bulk('RPUSH', target, rev)
  redis.call('ZADD', wk, 0, 'w')
end
