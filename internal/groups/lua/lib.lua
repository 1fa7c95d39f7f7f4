-- internal/groups lib.lua: FIFO groups (broker.Message.Group), shared by the
-- list and stream drivers' scripts. It comes after internal/timers' lib
-- (bulk, CHUNK). Helpers are locals, as Redis 7 forbids script globals.
--
-- A group lets at most its limit of jobs be admitted at once: in the queue
-- (ready), in flight, or waiting as a retry timer. The rest wait in the
-- group's line, in enqueue order, outside the queue, and each job that ends
-- (ack, discard, poison, cancel) lets the next one in, at the back of the
-- queue: so groups take turns with each other and with ungrouped jobs. A
-- retry, a postpone, a release or a crash recovery does not end a job: it
-- keeps its place and the group waits for it.
--
-- Keys (all under the queue's hash tag), taken as a table G from
-- group_keys(first), KEYS[first] .. KEYS[first + 3]:
--   jobs   HASH job ID -> "a<group>" while admitted, "w<member>" while waiting
--   state  HASH group -> "<admitted>,<limit>,<last seq>", present while the
--          group has a job admitted or waiting
--   wait   ZSET member "<len(group)>:<group><seq, 16 digits>", score 0: the
--          lines of every group, each in enqueue order (a lex range)
--   msgs   HASH member -> stored message of a waiting job
--
-- KEYS, ARGV, reply: none of its own; see each script.

local function group_keys(first)
  return {jobs = KEYS[first], state = KEYS[first + 1], wait = KEYS[first + 2], msgs = KEYS[first + 3]}
end

-- group_line returns the lex range of group g's members.
local function group_line(g)
  local p = #g .. ':' .. g
  return '[' .. p, '(' .. p .. '\255'
end

-- group_parse reads a group's state s (nil: none) into its admitted count,
-- limit and last sequence number (0, 1, 0 for none).
local function group_parse(s)
  local a, l, q
  if s then
    a, l, q = string.match(s, '^(%d+),(%d+),(%d+)$')
  end
  if not a then
    return 0, 1, 0
  end
  return tonumber(a), tonumber(l), tonumber(q)
end

-- group_get returns group g's admitted count, limit and last sequence
-- number (0, 1, 0 for a group with nothing admitted or waiting).
local function group_get(G, g)
  return group_parse(redis.call('HGET', G.state, g))
end

-- group_message_id returns the ID of stored message v (internal/codec's
-- header), nil when v is none.
local function group_message_id(v)
  local pos = string.match(v, '^1,%d+,%d+,%d+,()')
  return pos and stored_id(v, pos)
end

-- group_let_in takes the line members ms out of the lines and admits their
-- jobs, in order: each stored message goes to admit(v), and its ID is
-- indexed as admitted to its group, of[i] for ms[i].
local function group_let_in(G, ms, of, admit)
  local admitted = {}
  for i = 1, #ms, CHUNK do
    local vs = redis.call('HMGET', G.msgs, unpack(ms, i, math.min(i + CHUNK - 1, #ms)))
    for j = 1, #vs do
      local v = vs[j]
      -- Every member has its message unless someone wrote the keys by hand.
      if v then
        local id = group_message_id(v)
        if id then
          admitted[#admitted + 1] = id
          admitted[#admitted + 1] = 'a' .. of[i + j - 1]
        end
        admit(v)
      end
    end
  end
  bulk('ZREM', G.wait, ms)
  bulk('HDEL', G.msgs, ms)
  bulk('HSET', G.jobs, admitted)
end

-- group_pump admits waiting jobs of group g, oldest first, while fewer than
-- l are admitted (a), handing each stored message to admit(v). It returns
-- the admitted count and whether jobs may still wait (the line was not
-- emptied).
local function group_pump(G, g, a, l, admit)
  if a >= l then
    return a, true
  end
  local lo, hi = group_line(g)
  local want = l - a
  local ms = redis.call('ZRANGEBYLEX', G.wait, lo, hi, 'LIMIT', 0, want)
  local of = {}
  for i = 1, #ms do
    of[i] = g
  end
  group_let_in(G, ms, of, admit)
  return a + #ms, #ms == want
end

-- group_hold takes job id of group g (limit l >= 1), stored message v:
-- admitted now (admit(v)) when the group has room and nobody waits, else
-- put at the end of the group's line. A limit raised by this job first
-- admits those already waiting. It returns false, storing nothing, when a
-- grouped job with that ID is admitted or waiting in the queue.
local function group_hold(G, id, g, l, v, admit)
  if redis.call('HEXISTS', G.jobs, id) == 1 then
    return false
  end
  local a, old, q = group_get(G, g)
  if a < l and a >= old then
    -- Jobs may wait behind the old limit: they go first.
    a = group_pump(G, g, a, l, admit)
  end
  if a < l then
    redis.call('HSET', G.jobs, id, 'a' .. g)
    admit(v)
    a = a + 1
  else
    q = q + 1
    local m = #g .. ':' .. g .. string.format('%016d', q)
    redis.call('ZADD', G.wait, 0, m)
    redis.call('HSET', G.msgs, m, v)
    redis.call('HSET', G.jobs, id, 'w' .. m)
  end
  redis.call('HSET', G.state, g, a .. ',' .. l .. ',' .. q)
  return true
end

-- group_release ends the admission of each job of ids (a list) that is
-- admitted to a group, and lets the next waiting jobs of those groups in
-- (admit(v) each, groups in the order their first job appears in ids). A
-- job that is not grouped, or is waiting, is left as it is. It returns the
-- number of jobs released. The groups' states, lines and jobs are read and
-- written a batch at a time: a settle of many grouped jobs costs a few
-- commands per call and one ZRANGEBYLEX per group with room.
local function group_release(G, ids, admit)
  if #ids == 0 then
    return 0
  end
  local order, dec, done, seen = {}, {}, {}, {}
  for i = 1, #ids, CHUNK do
    local part = {unpack(ids, i, math.min(i + CHUNK - 1, #ids))}
    local vals = redis.call('HMGET', G.jobs, unpack(part))
    for j = 1, #part do
      local s = vals[j]
      if s and string.sub(s, 1, 1) == 'a' and not seen[part[j]] then
        seen[part[j]] = true
        local g = string.sub(s, 2)
        if not dec[g] then
          order[#order + 1] = g
          dec[g] = 0
        end
        dec[g] = dec[g] + 1
        done[#done + 1] = part[j]
      end
    end
  end
  if #done == 0 then
    return 0
  end
  bulk('HDEL', G.jobs, done)
  local members, of = {}, {}
  local keep, drop = {}, {}
  for i = 1, #order, CHUNK do
    local part = {unpack(order, i, math.min(i + CHUNK - 1, #order))}
    local states = redis.call('HMGET', G.state, unpack(part))
    for j = 1, #part do
      local g = part[j]
      local a, l, q = group_parse(states[j])
      a = math.max(0, a - dec[g])
      if a < l then
        local lo, hi = group_line(g)
        local ms = redis.call('ZRANGEBYLEX', G.wait, lo, hi, 'LIMIT', 0, l - a)
        for k = 1, #ms do
          members[#members + 1] = ms[k]
          of[#of + 1] = g
        end
        a = a + #ms
      end
      if a == 0 then
        -- Nothing admitted, so nothing waits (the line was empty).
        drop[#drop + 1] = g
      else
        keep[#keep + 1] = g
        keep[#keep + 1] = a .. ',' .. l .. ',' .. q
      end
    end
  end
  group_let_in(G, members, of, admit)
  bulk('HSET', G.state, keep)
  bulk('HDEL', G.state, drop)
  return #done
end

-- group_suffix returns how the stored message of a job of group g ends:
-- internal/codec writes the group last, as the header broker.HeaderGroup
-- ("conveyor-group", 14 bytes), its length a uvarint (a group name is at
-- most 128 bytes: one or two bytes).
local function group_suffix(g)
  local n = #g
  local len = string.char(n)
  if n >= 128 then
    len = string.char(n % 128 + 128, math.floor(n / 128))
  end
  return '\14conveyor-group' .. len .. g
end

-- group_end releases the groups of the jobs whose stored messages vs (a
-- list; false entries are skipped) end, for a script that holds the
-- messages and does not know whether they are grouped: one EXISTS when the
-- queue has no grouped job. A message is released only when it is the
-- admitted job itself, its ID admitted to a group and its stored form
-- carrying that group, so that a plain job that shares an ID with a
-- grouped one releases nothing. It returns the number released.
local function group_end(G, vs, admit)
  if #vs == 0 or redis.call('EXISTS', G.jobs) == 0 then
    return 0
  end
  local ids, ms = {}, {}
  for i = 1, #vs do
    local id = vs[i] and group_message_id(vs[i])
    if id then
      ids[#ids + 1] = id
      ms[#ms + 1] = vs[i]
    end
  end
  local ending = {}
  for i = 1, #ids, CHUNK do
    local states = redis.call('HMGET', G.jobs, unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
    for j = 1, #states do
      local s = states[j]
      if s and string.sub(s, 1, 1) == 'a' then
        local suffix = group_suffix(string.sub(s, 2))
        local v = ms[i + j - 1]
        if string.sub(v, -#suffix) == suffix then
          ending[#ending + 1] = ids[i + j - 1]
        end
      end
    end
  end
  return group_release(G, ending, admit)
end

-- group_unwait removes job id from its group's line when it waits there,
-- and reports whether it did (the job is gone). An admitted job is left
-- as it is: it ends where it is (see group_release).
local function group_unwait(G, id)
  local s = redis.call('HGET', G.jobs, id)
  if not s or string.sub(s, 1, 1) ~= 'w' then
    return false
  end
  local m = string.sub(s, 2)
  redis.call('ZREM', G.wait, m)
  redis.call('HDEL', G.msgs, m)
  redis.call('HDEL', G.jobs, id)
  -- The group's state stays: a job waits only while others are admitted.
  return true
end
