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
