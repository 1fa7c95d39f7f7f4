-- fetch.lua: take up to max messages for one consumer, without blocking.
--
-- In order: promote due delayed messages into the stream (at most ARGV[6]);
-- when ARGV[5] is a cursor, take over entries idle longer than the visibility
-- timeout with XAUTOCLAIM (which also drops entries deleted while pending
-- from the PEL and names them: they are returned so the caller reports them);
-- then read new entries with XREADGROUP ... > (non-blocking).
--
-- With ARGV[3] = 0 it only promotes and reports: the driver then reads new
-- entries itself, pipelined right after this call, because handing entries
-- through Lua costs Redis about as much again as reading them. It runs the
-- whole script when it takes over expired leases.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:delayed  ZSET, score = run-at (unix ms)
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  max messages to return (the caller caps it at 1000); 0 reads nothing
--          (ARGV[5] must then be "")
-- ARGV[4]  visibility timeout (ms): the idle time after which an entry is taken over
-- ARGV[5]  XAUTOCLAIM cursor ("0-0" to start a pass), or "" to skip reclaiming
-- ARGV[6]  max delayed messages to promote in this call
--
-- Reply: a flat array
--   [1] next XAUTOCLAIM cursor ("" when reclaiming was skipped)
--   [2] ms until the next delayed message is due, -1 when there is none
--       (only computed when nothing was fetched, else -1)
--   [3] 1 when the stream does not exist (nothing to read; block on its creation), else 0
--   [4] d = number of entry IDs XAUTOCLAIM found deleted while pending
--   [5 .. 4+d] those IDs
--   then per message three items: entry ID, delivery count (what fences the
--   delivery, with the owner), encoded message ("" if the entry has no field "m")
-- Bounded: promotion by ARGV[6], reclaim and read by ARGV[3].
local stream, delayed = KEYS[1], KEYS[2]
local group, me = ARGV[1], ARGV[2]
local max = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local exists = redis.call('EXISTS', stream) == 1

local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, tonumber(ARGV[6]))
if #due > 0 then
  if not exists then
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
    exists = true
  end
  for i = 1, #due do
    redis.call('XADD', stream, '*', 'm', due[i])
  end
  redis.call('ZREM', delayed, unpack(due))
end

local function next_due()
  local h = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if h[2] == nil then
    return -1
  end
  local d = tonumber(h[2]) - now
  if d < 0 then
    d = 0
  end
  return d
end

if not exists then
  return {'', next_due(), 1, 0}
end

local function body(fields)
  if fields then
    for j = 1, #fields, 2 do
      if fields[j] == 'm' then
        return fields[j + 1]
      end
    end
  end
  return ''
end

local out = {'', -1, 0, 0}
local got = 0

if ARGV[5] ~= '' then
  local r = redis.call('XAUTOCLAIM', stream, group, me, ARGV[4], ARGV[5], 'COUNT', max)
  out[1] = r[1]
  local deleted = r[3] or {}
  out[4] = #deleted
  for i = 1, #deleted do
    out[#out + 1] = deleted[i]
  end
  for _, e in ipairs(r[2]) do
    local id = e[1]
    local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
    local count = 1
    if p then
      count = p[4]
    end
    out[#out + 1] = id
    out[#out + 1] = count
    out[#out + 1] = body(e[2])
    got = got + 1
  end
end

if got < max then
  local r = redis.call('XREADGROUP', 'GROUP', group, me, 'COUNT', max - got, 'STREAMS', stream, '>')
  if r and r[1] then
    for _, e in ipairs(r[1][2]) do
      out[#out + 1] = e[1]
      out[#out + 1] = 1
      out[#out + 1] = body(e[2])
      got = got + 1
    end
  end
end

if got == 0 then
  out[2] = next_due()
end
return out
