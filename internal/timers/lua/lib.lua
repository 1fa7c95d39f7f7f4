-- lib.lua (internal/timers): helpers for every script that touches a queue's
-- timers, and the general ones the list driver's scripts share. The Go side
-- puts this text in front of each such script, so every script is still one
-- self-contained EVAL of fixed text; the helpers are locals, as Redis 7
-- forbids script globals.
--
-- A queue's timers are two keys: the delayed ZSET (member = timer ID, the
-- message ID; score = due time, unix ms) and the timers HASH (timer ID ->
-- stored message). Both change together, in one script, always. The wake
-- channel is the delayed key with "delayed" replaced by "wake"; it is a
-- channel, not a key, so it travels outside KEYS.
--
-- KEYS, ARGV, reply: none of its own; see each script.

local CHUNK = 1000 -- arguments per redis.call; even, so pairs never split

-- now_ms is the server's time in unix milliseconds: one clock for every
-- worker, however skewed theirs are.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- bulk runs cmd on key (then opt, when given) with the flat argument list a,
-- CHUNK at a time, so a big batch neither overflows unpack nor makes one
-- command per item.
local function bulk(cmd, key, a, opt)
  for i = 1, #a, CHUNK do
    if opt then
      redis.call(cmd, key, opt, unpack(a, i, math.min(i + CHUNK - 1, #a)))
    else
      redis.call(cmd, key, unpack(a, i, math.min(i + CHUNK - 1, #a)))
    end
  end
end

-- stored_id returns the message ID of stored message m whose tail
-- "<len(id)>:<id><body>" starts at position pos (see internal/codec), nil
-- when the tail is malformed.
local function stored_id(m, pos)
  local l, ipos = string.match(string.sub(m, pos, pos + 20), '^(%d+):()')
  if not l then
    return nil
  end
  ipos = pos + ipos - 1
  return string.sub(m, ipos, ipos + tonumber(l) - 1)
end

-- keep_recent trims the ZSET key, scored by time (unix ms), to the
-- members of the last age ms before now and to its newest max members, and
-- lets it expire age ms from now (a record of recent events: reclaimed
-- leases, cancelled deliveries).
local function keep_recent(key, now, age, max)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - age)
  local n = redis.call('ZCARD', key)
  if n > max then
    redis.call('ZREMRANGEBYRANK', key, 0, n - max - 1)
  end
  redis.call('PEXPIRE', key, age)
end

-- now_ms_up is the server's time in unix milliseconds rounded up: the
-- base of a due time, which must not come before the sender's (see due).
local function now_ms_up()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end

-- due returns the due time, unix ms as a decimal string, of a wait of
-- wait ms (a number) from now (ms, from now_ms_up): callers send waits,
-- not times, so that a client's clock never meets the server's (see In in
-- timers.go). With both rounded up, a due time is never before the one
-- the sender meant when the clocks agree.
local function due(now, wait)
  return string.format('%.0f', now + wait)
end

-- timer_head returns the due time of the earliest timer, nil when none.
local function timer_head(delayed)
  return tonumber(redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')[2])
end

-- timer_wake tells sleeping promoters that a timer due at at (ms) is being
-- added or moved, when it will be the earliest (head is the earliest due
-- time before the change, nil when there is none). Later timers wake
-- nobody: the promoters already sleep until an earlier one.
--
-- A script calls it before its first write, not after: Redis checks each
-- command of a script against the user's ACL when the script reaches it,
-- and Redis 7 refuses a PUBLISH to a channel the user may not use
-- (acl-pubsub-default resetchannels), so a PUBLISH after the writes would
-- fail the call and leave what it wrote. Subscribers receive the message
-- only once the script has ended, so no promoter can look before the timer
-- is there. A wake-up for a change the script then does not make (a lease
-- lost, a duplicate ID) costs a promoter one early look, nothing more.
local function timer_wake(delayed, head, at)
  if head == nil or tonumber(at) < head then
    local ch = string.sub(delayed, 1, #delayed - 7) .. 'wake'
    local r = redis.pcall('PUBLISH', ch, at)
    if type(r) == 'table' and r.err then -- Redis's own error does not name the channel
      error({err = r.err .. ': ' .. ch .. " (the delay promoters' wake-up); nothing was written"})
    end
  end
end

-- timer_put stores v as the timer id due at at (ms, a string as sent); the
-- caller made sure id is free.
local function timer_put(delayed, timers, id, at, v)
  redis.call('ZADD', delayed, at, id)
  redis.call('HSET', timers, id, v)
end

-- timer_free returns a timer ID for a retry of message id: id itself when
-- no timer has it, else id with a "#r<n>" suffix (a caller's timer, or
-- another message's retry, took the ID meanwhile); past 16 of those, a
-- suffix from the server's clock in microseconds. nil only if even that is
-- taken (it cannot be, short of a hand-written timer).
local function timer_free(delayed, id)
  if not redis.call('ZSCORE', delayed, id) then
    return id
  end
  for i = 1, 16 do
    local m = id .. '#r' .. i
    if not redis.call('ZSCORE', delayed, m) then
      return m
    end
  end
  local t = redis.call('TIME')
  local m = id .. '#r' .. t[1] .. string.format('%06d', tonumber(t[2]))
  if not redis.call('ZSCORE', delayed, m) then
    return m
  end
  return nil
end

-- enqueue_each stores the messages of an enqueue call, given as stride
-- (5 when nil, or more) ARGV items each from ARGV[first] on: the wait until
-- it is due (ms from the server's now; 0: now), message ID,
-- stored message, u (its unique key is KEYS[u]; 0: none), the unique key's
-- TTL (ms), then any items of the caller's own. A message due later becomes
-- a timer, refused when a pending timer has its ID; a unique key is claimed
-- with SET NX PX, the message refused when it is held; every other message
-- is handed to ready(v, i), i its first item's index in ARGV, in ARGV order;
-- ready may refuse it as a duplicate ID by returning false (a unique key it
-- claimed is then given back). The promoters are woken, before anything is
-- written (see timer_wake), when the earliest run-at of the call after now
-- is ahead of the earliest timer.
-- Returns the numbers k (1-based) of the refused messages: k for a
-- duplicate ID, -k for a held unique key.
local function enqueue_each(delayed, timers, first, ready, stride)
  stride = stride or 5
  -- The due times first, only for messages that wait (ats: message
  -- number k -> due time, a string): the wake-up for the earliest timer the
  -- call may add goes out before anything is written.
  local ats, now, soonest
  for i = first, #ARGV, stride do
    if ARGV[i] ~= '0' then
      ats, now = ats or {}, now or now_ms_up()
      local wait = tonumber(ARGV[i])
      ats[(i - first) / stride + 1] = due(now, wait)
      if not soonest or wait < soonest then
        soonest = wait
      end
    end
  end
  if soonest then
    timer_wake(delayed, timer_head(delayed), due(now, soonest))
  end
  local dups = {}
  for i = first, #ARGV, stride do
    local id, u = ARGV[i + 1], tonumber(ARGV[i + 3])
    local k = (i - first) / stride + 1
    local at = ats and ats[k]
    local later = at ~= nil
    if later and redis.call('ZSCORE', delayed, id) then
      dups[#dups + 1] = k
    elseif u > 0 and not redis.call('SET', KEYS[u], id, 'NX', 'PX', ARGV[i + 4]) then
      dups[#dups + 1] = -k
    elseif later then
      timer_put(delayed, timers, id, at, ARGV[i + 2])
    elseif ready(ARGV[i + 2], i) == false then
      if u > 0 then
        redis.call('DEL', KEYS[u])
      end
      dups[#dups + 1] = k
    end
  end
  return dups
end

-- collect returns a list and a function that appends to it: the admit
-- function internal/groups' helpers call, for a caller that then pushes
-- what they admitted at once (push_to).
local function collect()
  local vs = {}
  return vs, function(v) vs[#vs + 1] = v end
end

-- push_to appends the stored messages vs, in order, to a queue's ready
-- structure target: a LIST (mode "list": LPUSH, the back of the queue) or
-- a STREAM (mode "stream": XADD field "m", the stream and its consumer
-- group group created when missing), and sets the wake signal wk (a ZSET,
-- internal/wake) when it is given; nothing when vs is empty.
local function push_to(target, mode, group, wk, vs)
  if #vs == 0 then
    return
  end
  if mode == 'stream' then
    if redis.call('EXISTS', target) == 0 then
      redis.call('XGROUP', 'CREATE', target, group, '0', 'MKSTREAM')
    end
    for i = 1, #vs do
      redis.call('XADD', target, '*', 'm', vs[i])
    end
  else
    bulk('LPUSH', target, vs)
  end
  if wk then
    redis.call('ZADD', wk, 0, 'w')
  end
end
