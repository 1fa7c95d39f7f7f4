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
--   state  HASH, for each group g that has a job admitted or waiting:
--            g          "<admitted>,<limit>"
--            "\1" .. g  its head place (16 digits), once a job has waited
--            "\2" .. g  its last place (16 digits), once a job has waited
--          (a group name has no control character, so the fields of two
--          groups never meet)
--   wait   ZSET read only to convert a group stored with its line there
--          (a state "<admitted>,<limit>,<last place>"; see group_convert)
--   msgs   HASH member "<len(group)>:<group><place, 16 digits>" -> stored
--          message of a waiting job
--
-- A group's line is its places head .. last: a job that must wait takes
-- place last + 1, and each one let in takes the place at head and moves
-- head on. Every place before head is empty; one at or after it is empty
-- only when its job was cancelled while it waited (a hole, skipped when
-- head passes it). So the next job of a group is found by name, in one
-- HMGET for all the groups a settle releases, without a sorted index; and
-- a release that lets the next job in rewrites the head alone. The places
-- are kept as 16 digits, so that a member's name is a concatenation and
-- two places compare as strings.
--
-- KEYS, ARGV, reply: none of its own; see each script.


local function group_keys(first)
  return {jobs = KEYS[first], state = KEYS[first + 1], wait = KEYS[first + 2], msgs = KEYS[first + 3]}
end

-- group_num returns the number decimal string d stands for, and group_str
-- the decimal string of number n: both cached for the call, as the same
-- few counts, limits and lengths recur in a batch and each conversion is
-- a C library call (without the caches a grouped job cost Redis 8% more
-- instructions).
local GROUP_NUM, GROUP_STR = {}, {}
local function group_num(d)
  local n = GROUP_NUM[d]
  if not n then
    n = tonumber(d)
    GROUP_NUM[d] = n
  end
  return n
end
local function group_str(n)
  local d = GROUP_STR[n]
  if not d then
    d = string.format('%d', n)
    GROUP_STR[n] = d
  end
  return d
end

-- group_prefix returns the prefix of the members of group (or limit
-- class) g's places.
local function group_prefix(g)
  return group_str(#g) .. ':' .. g
end

-- group_line returns the lex range of the members of group (or limit
-- class) g in a line ZSET that orders them by name.
local function group_line(g)
  local p = group_prefix(g)
  return '[' .. p, '(' .. p .. '\255'
end

-- The head and last place of a group that has none (no job ever waited).
local GROUP_FIRST, GROUP_NONE = '0000000000000001', '0000000000000000'

-- group_place returns place number n as 16 digits.
local function group_place(n)
  return string.format('%016d', n)
end

-- group_after returns the place after place p (16 digits).
local function group_after(p)
  local b = string.byte(p, 16)
  if b < 57 then
    -- Below "9": the last digit alone changes.
    return string.sub(p, 1, 15) .. string.char(b + 1)
  end
  return group_place(tonumber(p) + 1)
end

-- group_counts returns the state "<admitted>,<limit>".
local function group_counts(a, l)
  return group_str(a) .. ',' .. group_str(l)
end

-- group_convert makes group g, stored with its line in the wait ZSET and
-- its state s "<admitted>,<limit>,<last place>", one whose line is found
-- by place: the head is the first member's place (last + 1 for an empty
-- line), the group's members leave the ZSET (their messages stay in msgs,
-- under the same names) and the state is written anew. An unreadable
-- state (written over by hand) counts as nothing admitted, limit 1, and
-- keeps the line it finds (head and last place fields, else the sorted
-- set's members): nothing waiting is stranded, though the group's order
-- and limit can be broken once, as they were before such a state. It
-- returns the admitted count, the limit, and the head and last places.
local function group_convert(G, g, s)
  local a, l, q = string.match(s, '^(%d+),(%d+),(%d+)$')
  if not a then
    local hq = redis.call('HMGET', G.state, '\1' .. g, '\2' .. g)
    if hq[2] then
      -- Counts written over by hand in a group of this format: its line
      -- stays as it is.
      return 0, 1, hq[1] or GROUP_FIRST, hq[2]
    end
  end
  local lo, hi = group_line(g)
  local first = redis.call('ZRANGEBYLEX', G.wait, lo, hi, 'LIMIT', 0, 1)[1]
  if a then
    a, l, q = tonumber(a), tonumber(l), group_place(tonumber(q))
  else
    a, l, q = 0, 1, GROUP_NONE
    local tail = redis.call('ZREVRANGEBYLEX', G.wait, hi, lo, 'LIMIT', 0, 1)[1]
    if tail then
      q = string.sub(tail, -16)
    end
  end
  local h = group_after(q)
  if first then
    h = string.sub(first, -16)
    redis.call('ZREMRANGEBYLEX', G.wait, lo, hi)
  end
  redis.call('HSET', G.state, g, group_counts(a, l), '\1' .. g, h, '\2' .. g, q)
  return a, l, h, q
end

-- group_get reads group g's state field s (nil: none) into its admitted
-- count and limit (0 and 1 for none); a group stored the older way is
-- converted (group_convert), and its head and last places are then the
-- third and fourth values.
local GROUP_COUNTS = {}
local function group_get(G, g, s)
  if not s then
    return 0, 1
  end
  local c = GROUP_COUNTS[s]
  if not c then
    local a, l = string.match(s, '^(%d+),(%d+)$')
    if not a then
      return group_convert(G, g, s)
    end
    c = {tonumber(a), tonumber(l)}
    GROUP_COUNTS[s] = c
  end
  return c[1], c[2]
end

-- group_message_id returns the ID of stored message v (internal/codec's
-- header, then "<len(id)>:<id>"), nil when v is none.
local function group_message_id(v)
  local n, pos = string.match(v, '^1,%d+,%d+,%d+,(%d+):()')
  return n and string.sub(v, pos, pos + group_num(n) - 1)
end

-- group_next takes up to want jobs from the line of group g (member
-- prefix pre), head place h, last place q: it appends their members to
-- ms, their stored messages to vs and group g to of, in order, and
-- returns the new head place. Holes are skipped, a window of up to 100
-- places (want's, at most CHUNK) per HMGET.
local function group_next(G, g, pre, h, q, want, ms, of, vs)
  local n = tonumber(h)
  while want > 0 and h <= q do
    local names = {}
    local last = math.min(tonumber(q), n + math.min(math.max(want, 100), CHUNK) - 1)
    for p = n, last do
      names[#names + 1] = pre .. group_place(p)
    end
    local got = redis.call('HMGET', G.msgs, unpack(names))
    for i = 1, #names do
      if want == 0 then
        break
      end
      n = n + 1
      if got[i] then
        ms[#ms + 1] = names[i]
        of[#of + 1] = g
        vs[#vs + 1] = got[i]
        want = want - 1
      end
    end
    h = group_place(n)
  end
  return h
end

-- group_let_in takes the line members ms out of the lines and admits their
-- jobs, in order: each stored message vs[i] (of ms[i]) goes to admit(v),
-- and its ID is indexed as admitted to its group, of[i].
local function group_let_in(G, ms, of, admit, vs)
  local admitted, n = {}, 0
  for k = 1, #ms do
    local v = vs[k]
    local id = group_message_id(v)
    if id then
      admitted[n + 1] = id
      admitted[n + 2] = 'a' .. of[k]
      n = n + 2
    end
    admit(v)
  end
  bulk('HDEL', G.msgs, ms)
  bulk('HSET', G.jobs, admitted)
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
  local a, old = group_get(G, g, redis.call('HGET', G.state, g))
  if a < l and a >= old then
    -- Jobs may wait behind the old limit: they go first.
    local hq = redis.call('HMGET', G.state, '\1' .. g, '\2' .. g)
    local h, q = hq[1] or GROUP_FIRST, hq[2] or GROUP_NONE
    if h <= q then
      local ms, of, vs = {}, {}, {}
      h = group_next(G, g, group_prefix(g), h, q, l - a, ms, of, vs)
      group_let_in(G, ms, of, admit, vs)
      a = a + #ms
      redis.call('HSET', G.state, '\1' .. g, h)
    end
  end
  if a < l then
    -- admit first: a store that fails (a command refused, a key of another
    -- type) must not leave the job recorded as admitted.
    admit(v)
    redis.call('HSET', G.jobs, id, 'a' .. g)
    redis.call('HSET', G.state, g, group_counts(a + 1, l))
    return true
  end
  local q = group_after(redis.call('HGET', G.state, '\2' .. g) or GROUP_NONE)
  local m = group_prefix(g) .. q
  redis.call('HSET', G.msgs, m, v)
  redis.call('HSET', G.jobs, id, 'w' .. m)
  redis.call('HSET', G.state, g, group_counts(a, l), '\2' .. g, q)
  return true
end

-- group_release ends the admission of each job of ids (a list) that is
-- admitted to a group, and lets the next waiting jobs of those groups in
-- (admit(v) each, groups in the order their first job appears in ids). A
-- job that is not grouped, or is waiting, is left as it is. It returns the
-- number of jobs released. The groups' states, lines and jobs are read and
-- written a batch at a time: a settle of many grouped jobs costs a few
-- commands per call, whatever the number of groups.
local function group_release(G, ids, admit)
  if #ids == 0 then
    return 0
  end
  -- order: the groups, in order; dec: jobs released per group.
  local order, dec, done, seen, ng, nd = {}, {}, {}, {}, 0, 0
  for i = 1, #ids, CHUNK do
    local last = math.min(i + CHUNK - 1, #ids)
    local vals = redis.call('HMGET', G.jobs, unpack(ids, i, last))
    for j = 1, #vals do
      local s, id = vals[j], ids[i + j - 1]
      -- 97: "a", admitted.
      if s and string.byte(s, 1) == 97 and not seen[id] then
        seen[id] = true
        local g = string.sub(s, 2)
        local d = dec[g]
        if not d then
          ng = ng + 1
          order[ng] = g
          d = 0
        end
        dec[g] = d + 1
        nd = nd + 1
        done[nd] = id
      end
    end
  end
  if nd == 0 then
    return 0
  end
  bulk('HDEL', G.jobs, done)
  -- Each group's counts and head (by place in order: a0 admitted as read,
  -- ga admitted now, gl limit, gh head, gq last place once read, gp member
  -- prefix).
  local fields = {}
  for k = 1, ng do
    local g = order[k]
    fields[2 * k - 1], fields[2 * k] = g, '\1' .. g
  end
  local a0, ga, gl, gh, gq, gp = {}, {}, {}, {}, {}, {}
  local wide = {}
  for i = 1, 2 * ng, CHUNK do
    local last = math.min(i + CHUNK - 1, 2 * ng)
    local vals = redis.call('HMGET', G.state, unpack(fields, i, last))
    for x = i, last, 2 do
      local k = (x + 1) / 2
      local g = order[k]
      local a, l, h, q = group_get(G, g, vals[x - i + 1])
      a0[k], gl[k], gh[k], gq[k] = a, l, h or vals[x - i + 2] or GROUP_FIRST, q
      a = a - dec[g]
      if a < 0 then
        a = 0
      end
      ga[k] = a
      if l - a > 1 and not q then
        -- Room for more than one: how far its line goes bounds the reads.
        wide[#wide + 1] = k
      end
    end
  end
  local function read_lasts(ks)
    for i = 1, #ks, CHUNK do
      local part = {}
      for x = i, math.min(i + CHUNK - 1, #ks) do
        part[#part + 1] = '\2' .. order[ks[x]]
      end
      local qs = redis.call('HMGET', G.state, unpack(part))
      for x = 1, #qs do
        gq[ks[i + x - 1]] = qs[x] or GROUP_NONE
      end
    end
  end
  read_lasts(wide)
  -- The places each group's room asks for, from its head, for all groups
  -- in one HMGET: the head alone for a room of one (the usual case), up to
  -- the room and the line's last place otherwise. A line waits only while
  -- its group is full, so the room is at most the jobs released here.
  local probe, np, from = {}, 0, {}
  for k = 1, ng do
    from[k] = np + 1
    local h, q = gh[k], gq[k]
    if ga[k] < gl[k] and not (q and h > q) then
      local p = group_prefix(order[k])
      gp[k] = p
      np = np + 1
      probe[np] = p .. h
      for _ = 2, gl[k] - ga[k] do
        if h == q then
          break
        end
        h = group_after(h)
        np = np + 1
        probe[np] = p .. h
      end
    end
  end
  from[ng + 1] = np + 1
  local got = {}
  for i = 1, np, CHUNK do
    local part = redis.call('HMGET', G.msgs, unpack(probe, i, math.min(i + CHUNK - 1, np)))
    for j = 1, #part do
      got[i + j - 1] = part[j]
    end
  end
  -- Each group's places in order: a job to let in, or none. None at a
  -- place up to the last is a hole (a job cancelled while it waited) that
  -- the head passes; where the last place is not known yet, it is read
  -- for all such groups at once (the end of a line, or a hole). upto[k]
  -- is the last of group k's places walked.
  local upto, stuck = {}, {}
  for k = 1, ng do
    upto[k] = from[k + 1] - 1
    for x = from[k], upto[k] do
      if not got[x] and not gq[k] then
        stuck[#stuck + 1] = k
        upto[k] = x - 1
        break
      end
      gh[k] = group_after(gh[k])
    end
  end
  read_lasts(stuck)
  -- The jobs let in, group by group in order: those found at the places
  -- walked, then, where holes took places the room asked for and the line
  -- goes on, those further on (rare).
  local members, of, vs = {}, {}, {}
  local moved = {}
  for k = 1, ng do
    moved[k] = upto[k] >= from[k]
    for x = from[k], upto[k] do
      if got[x] then
        members[#members + 1], of[#of + 1], vs[#vs + 1] = probe[x], order[k], got[x]
        ga[k] = ga[k] + 1
      end
    end
    if gp[k] and gq[k] and ga[k] < gl[k] and gh[k] <= gq[k] then
      local before = #members
      local h = group_next(G, order[k], gp[k], gh[k], gq[k], gl[k] - ga[k], members, of, vs)
      moved[k] = moved[k] or h ~= gh[k]
      gh[k] = h
      ga[k] = ga[k] + #members - before
    end
  end
  local keep, drop, nk, nx = {}, {}, 0, 0
  for k = 1, ng do
    local g = order[k]
    if ga[k] == 0 then
      -- Nothing admitted, so nothing waits (the line was empty).
      drop[nx + 1], drop[nx + 2], drop[nx + 3] = g, '\1' .. g, '\2' .. g
      nx = nx + 3
    else
      if ga[k] ~= a0[k] then
        keep[nk + 1], keep[nk + 2] = g, group_counts(ga[k], gl[k])
        nk = nk + 2
      end
      if moved[k] then
        keep[nk + 1], keep[nk + 2] = '\1' .. g, gh[k]
        nk = nk + 2
      end
    end
  end
  group_let_in(G, members, of, admit, vs)
  bulk('HSET', G.state, keep)
  bulk('HDEL', G.state, drop)
  return nd
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

-- group_end_push is group_end whose next jobs are stored at once with
-- push_to(target, mode, group, wk): before the caller writes anything
-- else, since they are out of their line by then and Redis keeps what a
-- script wrote before a command of it failed. It returns how many it
-- stored.
local function group_end_push(G, vs, target, mode, group, wk)
  local next_jobs, admit = collect()
  group_end(G, vs, admit)
  push_to(target, mode, group, wk, next_jobs)
  return #next_jobs
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
  -- Its place becomes a hole, skipped when the head passes it.
  redis.call('HDEL', G.msgs, m)
  redis.call('HDEL', G.jobs, id)
  -- The group's state stays: a job waits only while others are admitted.
  return true
end
