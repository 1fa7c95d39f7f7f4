-- lib.lua: helpers shared by the stream driver's scripts that read entries
-- (fetch.lua, admit.lua and the inspection scripts) or settle them (ack.lua,
-- ack_record.lua, requeue.lua, discard.lua), and append the jobs a group
-- or a concurrency limit lets in (internal/groups, internal/limits). The Go
-- side puts this text in front of each of them (see scripts.go and
-- inspect.go), so every script still runs as one self-contained EVAL; the
-- helpers are locals, as Redis 7 forbids script globals.
--
-- An entry holds one field, "m": the stored message (internal/codec).
--
-- KEYS, ARGV, reply: none of their own; see each script.

-- entry_body returns the field "m" of an entry's fields, "" when it has none.
local function entry_body(fields)
  if fields then
    for j = 1, #fields, 2 do
      if fields[j] == 'm' then
        return fields[j + 1]
      end
    end
  end
  return ''
end

-- lost_status returns the status of a settle of the delivery of entry id
-- with delivery count count, whose entry is not pending in the group (the
-- caller looked, or the stream is gone): "LEASE_LOST" when the entry is
-- still in the stream (it waits for another delivery) or when a reclaim
-- took that delivery's lease (the record rec, internal/reclaims, holds its
-- token: whoever settled the entry since, it was not this delivery's
-- holder); else "GONE": a settle of this delivery ended it, maybe an
-- earlier one whose reply the caller lost.
local function lost_status(stream, rec, id, count)
  if #redis.call('XRANGE', stream, id, id) > 0 or was_reclaimed(rec, id .. '/' .. count) then
    return 'LEASE_LOST'
  end
  return 'GONE'
end

-- ack_entries settles as done the deliveries ARGV names from ARGV[first]
-- on, one every step arguments: entry ID at ARGV[i], delivery count (the
-- count part of the token) at ARGV[i + 1]. KEYS[1..4] and ARGV[1..4] are
-- ack.lua's (stream, stats, reclaimed, wake; group, consumer, lowest and
-- highest entry ID). It returns one status per delivery, in order, as
-- ack.lua replies, and the entry IDs of the deliveries settled, whose
-- concurrency limit slots the caller gives back (internal/limits). ack.lua
-- is this call and that; ack_record.lua adds the records of finished jobs
-- and the release of grouped jobs, which is why it is shared here rather
-- than written out in both.
--
-- Each delivery is fenced: its entry must be pending in the group, owned by
-- this consumer, with the delivery count the consumer was handed (XACK alone
-- checks neither owner nor count). Acked entries are XACKed and XDELed (the
-- driver never trims, so deleting acked entries is what bounds the stream).
-- A drained stream stays, with its group: idle consumers block on it in
-- XREADGROUP, and each new entry wakes one of them.
--
-- The entries of one batch were mostly delivered together, so one XPENDING
-- over this consumer's entries from ARGV[3] to ARGV[4] usually finds all of
-- them; an XPENDING per ID made fencing cost nearly twice as much (measured
-- in Redis instructions, mostly spent handing replies to Lua). The range
-- only saves lookups: an ID it returns is pending for this consumer with the
-- count it shows; an ID it does not return (lease lost, or past the range's
-- limit of two entries per delivery) is looked up on its own. So fencing
-- does not depend on the bounds being right.
--
-- The acked entries are counted in the queue's stats HASH (field
-- processed): one HINCRBY per batch, for the Inspector's throughput.
local function ack_entries(first, step)
  local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
  local out = {}

  if redis.call('EXISTS', stream) == 0 then
    for i = first, #ARGV, step do
      out[#out + 1] = lost_status(stream, KEYS[3], ARGV[i], ARGV[i + 1])
    end
    return out, {}
  end

  local seen = {}
  local n = math.floor((#ARGV - first + 1) / step)
  for _, p in ipairs(redis.call('XPENDING', stream, group, ARGV[3], ARGV[4], 2 * n, me)) do
    seen[p[1]] = p[4]
  end

  local ids = {}
  for i = first, #ARGV, step do
    local id = ARGV[i]
    local count = seen[id]
    local status = 'LEASE_LOST'
    if count == nil then
      local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
      if p and p[2] == me then
        count = p[4]
      elseif not p then
        status = lost_status(stream, KEYS[3], id, ARGV[i + 1])
      end
    end
    if count == tonumber(ARGV[i + 1]) then
      ids[#ids + 1] = id
      out[#out + 1] = 'OK'
    else
      out[#out + 1] = status
    end
  end

  if #ids > 0 then
    -- XACK first: it may run on a full Redis (no deny-oom flag), and once a
    -- script has written, Redis lets it finish. A deny-oom HINCRBY first
    -- would have the whole ack refused when Redis is at its maxmemory, the
    -- one time acking (which frees memory) matters most. A caller's own
    -- writes (ack_record.lua's records and groups) come after this call for the same
    -- reason.
    redis.call('XACK', stream, group, unpack(ids))
    redis.call('XDEL', stream, unpack(ids))
    redis.call('HINCRBY', KEYS[2], 'processed', #ids)
    if redis.call('XLEN', stream) == 0 then
      redis.call('DEL', KEYS[4])
    end
  end
  return out, ids
end

-- limit_admit applies the queue's concurrency limits (internal/limits, keys
-- L) to the entries ds read for a consumer, flat triples of entry ID,
-- delivery count and stored message, before they are handed out. A slot
-- is held under the entry ID, which a takeover keeps: an entry that holds
-- slots already (its earlier delivery's lease was taken over) keeps them
-- and takes none. Each other entry takes its slots or, over a limit,
-- waits in that limit's line: its entry is XACKed and XDELed (it is not
-- handed out, and no attempt is counted), and the line keeps its message
-- with this entry's crash recoveries (delivery count - 1) added, as a
-- requeue stores it. wk, the wake signal, is deleted when that leaves the
-- stream with no entry. cfg is the queue's limits (limit_config; nil:
-- none, and nothing is done). It returns the set of the entry IDs parked
-- (ID -> true) and their number.
local function limit_admit(stream, group, wk, L, cfg, ds)
  if not cfg or #ds == 0 then
    return {}, 0
  end
  local ids = {}
  for i = 1, #ds, 3 do
    ids[#ids + 1] = ds[i]
  end
  local held = {}
  for i = 1, #ids, CHUNK do
    local part = {unpack(ids, i, math.min(i + CHUNK - 1, #ids))}
    local vals = redis.call('HMGET', L.of, unpack(part))
    for j = 1, #part do
      if vals[j] then
        held[part[j]] = true
      end
    end
  end
  local hs, vs = {}, {}
  for i = 1, #ds, 3 do
    if not held[ds[i]] then
      local m, count = ds[i + 2], tonumber(ds[i + 1])
      if count > 1 then
        local a, r, pos = string.match(m, '^1,%d+,(%d+),(%d+),()')
        if a then
          m = '1,0,' .. a .. ',' .. (tonumber(r) + count - 1) .. ',' .. string.sub(m, pos)
        end
      end
      hs[#hs + 1] = ds[i]
      vs[#vs + 1] = m
    end
  end
  local ok, holds = limit_take(L, cfg, vs)
  local rs, rh, parked, set = {}, {}, {}, {}
  for i = 1, #hs do
    if ok[i] then
      rs[#rs + 1] = hs[i]
      rh[#rh + 1] = holds[i]
    else
      parked[#parked + 1] = hs[i]
      set[hs[i]] = true
    end
  end
  limit_hold(L, rs, rh, #rs)
  if #parked > 0 then
    bulk('XACK', stream, parked, group)
    bulk('XDEL', stream, parked)
    if redis.call('XLEN', stream) == 0 then
      redis.call('DEL', wk)
    end
  end
  return set, #parked
end
