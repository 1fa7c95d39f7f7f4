-- inspect_lib.lua: helpers of the stream driver's inspection scripts, put
-- in front of each of them (after internal/timers' lib.lua, for now_ms, and
-- lib.lua, for entry_body, where a script reads entries).
--
-- A queue's stream holds only ready and in-flight entries (acked, retried
-- and discarded entries are XDELed): the entries up to the group's
-- last-delivered-id were delivered and are in its pending list (PEL), the
-- entries after it were not delivered yet (retried and released messages
-- are new entries, so they come after it too). A stream whose group is
-- missing is all ready: the next fetch recreates the group from ID 0.
--
-- KEYS, ARGV, reply: none of their own; see each script.

-- last_delivered returns the group's last-delivered-id ("0-0" when the
-- group is missing), nil when the stream does not exist.
local function last_delivered(stream, group)
  local gs = redis.pcall('XINFO', 'GROUPS', stream)
  if type(gs) ~= 'table' or gs.err then
    return nil
  end
  for _, g in ipairs(gs) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then
        name = g[i + 1]
      elseif g[i] == 'last-delivered-id' then
        last = g[i + 1]
      end
    end
    if name == group then
      return last
    end
  end
  return '0-0'
end

-- pending_count returns how many entries the group's PEL holds (0 when the
-- group is missing).
local function pending_count(stream, group)
  local p = redis.pcall('XPENDING', stream, group)
  if type(p) ~= 'table' or p.err then
    return 0
  end
  return p[1]
end

-- after_cursor is the XRANGE or XPENDING start just past the entry ID
-- cursor; "" starts at the first entry.
local function after_cursor(cursor)
  if cursor == '' then
    return '-'
  end
  return '(' .. cursor
end

-- id_before reports whether entry ID a comes before entry ID b, compared
-- as Redis orders them (by time, then sequence; neither has leading zeros).
local function id_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then
    return #am < #bm
  end
  if am ~= bm then
    return am < bm
  end
  if #as ~= #bs then
    return #as < #bs
  end
  return as < bs
end

-- stretch returns the next n entries of the stream's part for mode after
-- cursor ("": from the part's start), last being the group's
-- last-delivered ID. Ready ("ready"): the entries after last; a cursor
-- consumers have read past since is moved up to last, as what they read is
-- in flight now. In flight (anything else): the entries up to last; nil
-- when none was ever delivered.
local function stretch(stream, mode, cursor, last, n)
  if mode == 'ready' then
    if cursor == '' or id_before(cursor, last) then
      cursor = last
    end
    return redis.call('XRANGE', stream, after_cursor(cursor), '+', 'COUNT', n)
  end
  if last == '0-0' then
    return nil
  end
  return redis.call('XRANGE', stream, after_cursor(cursor), last, 'COUNT', n)
end

-- is_job reports whether stored message m is job id's: its tail starts
-- "<len(id)>:<id>", and comparing that much matches the ID exactly.
local function is_job(m, id)
  local pos = string.match(m, '^1,%d+,%d+,%d+,()')
  local needle = #id .. ':' .. id
  return pos ~= nil and string.sub(m, pos, pos + #needle - 1) == needle
end
