-- fetch.lua: take up to max messages for one consumer, without blocking.
--
-- In order: when ARGV[5] is a cursor, take over up to max entries idle
-- longer than the visibility timeout with one XAUTOCLAIM ... COUNT max
-- (which also drops entries deleted while pending from the PEL and names
-- them: they are returned so the caller reports them); when that delivers
-- nothing, read new entries with XREADGROUP ... > (non-blocking).
-- Taken-over entries are delivered in a batch, so a fleet recovers at full
-- speed, except an entry on its last chance (one more expiry makes it
-- poison: its lease expiries one short of ARGV[6], when that is 2 or more;
-- broker.IsLastChance), which is delivered alone, so that if it is poison
-- no entry dies with it. Entries the call took over but does not deliver
-- (beside a last-chance one) are put back as they were, idle and with
-- their delivery count, for the next takeover (XCLAIM ... IDLE RETRYCOUNT).
--
-- Poison cap (DESIGN invariant 3): a taken-over entry has had
-- <stored recoveries> + <delivery count after the claim> - 1 lease expiries.
-- When that reaches ARGV[6] (> 0), the entry is XACKed and XDELed instead
-- of delivered, and a discard record "d1,<unix ms>,<len(reason)>:<reason>
-- <encoded message>" with reason "conveyor: poison: lease expired <n> times"
-- is pushed on the discard list, the stored message's recoveries set to n
-- (as discard.lua does). The list is capped at ARGV[7] and its records may
-- be ARGV[8] old at most, the trimmed records counted in KEYS[3] and KEYS[4]
-- (internal/discards' lib.lua, which the Go side puts in front).
--
-- Cancelled jobs: a taken-over entry whose entry ID is marked in KEYS[7]
-- (its job was cancelled while in flight, and its holder died before
-- ending it; internal/cancels, cancel.lua) is XACKed and XDELed, and its
-- mark removed, instead of delivered or discarded. Its token goes to the
-- record of reclaimed leases like any other taken over, so a late settle
-- by its dead holder hears LEASE_LOST. The marks are read only when a
-- takeover takes something (one EXISTS when none is marked).
--
-- Groups: an entry discarded as poison or removed as cancelled ends its
-- job; when it belongs to a group (internal/groups), the next waiting job
-- of its group is appended to the stream (one EXISTS when the queue has no
-- grouped job). An entry taken over and delivered again keeps its place.
--
-- Concurrency limits (internal/limits; limit_admit in lib.lua): a slot is
-- held under the entry ID, which a takeover keeps, so an entry taken over
-- keeps the slots its earlier delivery took. An entry that ends here
-- (poison, cancelled, or found deleted while pending) gives its slots
-- back, and the jobs that lets in are appended to the stream. The entries
-- to deliver that hold no slot, the new ones read and those taken over
-- that were read before the queue had limits, take their slots; one over
-- a limit is XACKed and XDELed instead of delivered and waits in the
-- limit's line. The limits are read (one HGETALL) only when the call has
-- entries to deliver; an ending entry costs one EXISTS while no delivery
-- holds a slot.
--
-- The driver runs it only for rounds that take over expired leases; other
-- rounds read new entries with a plain XREADGROUP (fetch.go, readNew).
-- Timers are not this script's business: a promoter appends them
-- (internal/timers), which wakes a blocked reader.
--
-- KEYS[1]  <prefix>:{<queue>}:stream   STREAM with the consumer group ARGV[1]
-- KEYS[2]  <prefix>:{<queue>}:dead     LIST of discard records, newest first
-- KEYS[3]  <prefix>:{<queue>}:dead_dropped  STRING count of records the cap trimmed
-- KEYS[4]  <prefix>:{<queue>}:dead_expired  STRING count of records the age limit trimmed
-- KEYS[5]  <prefix>:{<queue>}:reclaimed  ZSET tokens "<entry ID>/<delivery count>" of
--          the deliveries whose lease a takeover took (internal/reclaims);
--          written only when a takeover claims an entry
-- KEYS[6]  <prefix>:{<queue>}:wake     ZSET wake signal: deleted when poison discards or
--          cancelled entries leave the stream with no entry (as ack.lua)
-- KEYS[7]  <prefix>:{<queue>}:canceled ZSET entry ID of a cancelled delivery (internal/cancels);
--          read only when a takeover claims an entry
-- KEYS[8..11] the queue's group keys (internal/groups); read only when a
--          takeover discards or removes an entry; KEYS[6] is set when a
--          grouped job is let in
-- KEYS[12..17] the queue's limit keys (internal/limits): limits, limit_state,
--          limit_of, limit_wait, limit_msgs, limit_jobs; KEYS[6] is set
--          when a job waiting for a slot is let in
-- ARGV[1]  consumer group name
-- ARGV[2]  consumer name
-- ARGV[3]  max messages to return (the caller caps it at 1000)
-- ARGV[4]  visibility timeout (ms): the idle time after which an entry is taken over
-- ARGV[5]  XAUTOCLAIM cursor ("0-0" to start a pass), or "" to skip reclaiming
-- ARGV[6]  lease expiries (count) at which a taken-over entry is discarded as
--          poison; 0 or less: never
-- ARGV[7]  max length of the discard list (count)
-- ARGV[8]  max age of discard records, ms (<= 0: no age limit)
--
-- Reply: a flat array
--   [1] next XAUTOCLAIM cursor ("" when reclaiming was skipped)
--   [2] number of entries read or taken over but not delivered: over a
--       concurrency limit, they wait in its line (see limit_admit)
--   [3] 1 when the stream does not exist (nothing to read; block on its creation), else 0
--   [4] d = number of entry IDs XAUTOCLAIM found deleted while pending
--   [5] p = number of entries discarded as poison
--   [6 .. 5+d] the deleted entry IDs
--   then p pairs: poisoned entry ID, message ID ("" if the message does not parse)
--   then per message three items: entry ID, delivery count (what fences the
--   delivery, with the owner), encoded message ("" if the entry has no field "m")
-- A pass ends (reply [1] "0-0") at the end of the pending list or at the
-- first entry whose ID is younger than the visibility timeout (its ID's
-- time is when it was added: it cannot have expired, nor any after it).
-- Bounded: one XAUTOCLAIM of COUNT ARGV[3] (it scans at most ten times
-- that many pending entries), one XPENDING per entry it claims, one
-- ZMSCORE of the entries it claims when any delivery of the queue is
-- marked; read ARGV[3]; with limits, a few commands per call and one XADD
-- per job let in (at most LET_IN_MAX, internal/limits).
local stream, dead = KEYS[1], KEYS[2]
local group, me = ARGV[1], ARGV[2]
local max = tonumber(ARGV[3])
local maxRecoveries = tonumber(ARGV[6])

local now = now_ms()

if redis.call('EXISTS', stream) == 0 then
  return {'', 0, 1, 0, 0}
end
local exists = true
local L = limit_keys(12)

local out = {'', 0, 0, 0, 0}
local got = 0
-- Triples of the entries to deliver, appended to out after the IDs.
local ds = {}

if ARGV[5] ~= '' then
  -- COUNT max scans at most ten times max pending entries; a pass that
  -- claims nothing goes on from the cursor in the caller's next round.
  local deleted = {}
  local r = redis.call('XAUTOCLAIM', stream, group, me, ARGV[4], ARGV[5], 'COUNT', math.max(max, 1))
  for _, id in ipairs(r[3] or {}) do
    deleted[#deleted + 1] = id
  end
  local cursor = r[1]
  -- The pass ends at the first entry added less than a visibility timeout
  -- ago: it cannot have been delivered longer ago than that, so neither it
  -- nor any later entry has expired. Without this bound a pass under a
  -- backlog chases the tail of a pending list that grows as fast as it
  -- scans.
  local cms = tonumber(string.match(cursor, '^(%d+)-'))
  if cms and cms > now - tonumber(ARGV[4]) then
    cursor = '0-0'
  end
  out[1] = cursor
  out[4] = #deleted
  for i = 1, #deleted do
    out[#out + 1] = deleted[i]
  end
  local claimed = {}
  for i, e in ipairs(r[2]) do
    claimed[i] = e[1]
  end
  local canceled = canceled_among(KEYS[7], claimed)
  -- ended: the job IDs of the entries discarded or removed (their jobs
  -- end here).
  local poisoned, records, taken, dropped, ended = {}, {}, {}, {}, {}
  -- lastrec: the lease expiries of an entry on its last chance (nil: none
  -- is); alone: a last-chance entry is delivered, nothing goes with it.
  local lastrec, alone = nil, false
  if maxRecoveries >= 2 then
    lastrec = maxRecoveries - 1
  end
  for _, e in ipairs(r[2]) do
    local id = e[1]
    local p = redis.call('XPENDING', stream, group, id, id, 1)[1]
    local count = 1
    if p then
      count = p[4]
    end
    -- The delivery whose lease ran out had the count before the claim: a
    -- settle of it that finds the entry gone must hear LEASE_LOST.
    if count > 1 then
      taken[#taken + 1] = id .. '/' .. (count - 1)
    end
    local m = entry_body(e[2])
    -- Lease expiries so far: those of earlier entries of this message,
    -- carried in the stored header, and this entry's (count - 1).
    local d, a, rec, pos = string.match(m, '^1,(%d+),(%d+),(%d+),()')
    local n = count - 1
    if d then
      n = n + tonumber(rec)
    end
    if canceled[id] then
      dropped[#dropped + 1] = id
      ended[#ended + 1] = m
    elseif maxRecoveries > 0 and n >= maxRecoveries then
      local mid = ''
      if d then
        mid = stored_id(m, pos) or ''
        m = '1,' .. d .. ',' .. a .. ',' .. n .. ',' .. string.sub(m, pos)
      end
      poisoned[#poisoned + 1] = id
      ended[#ended + 1] = m
      records[#records + 1] = {n, m}
      out[#out + 1] = id
      out[#out + 1] = mid
    elseif alone or (lastrec and n >= 1 and n >= lastrec and got > 0) then
      -- Not beside a last-chance entry: back as it was before the claim.
      redis.call('XCLAIM', stream, group, me, 0, id, 'IDLE', ARGV[4], 'RETRYCOUNT', count - 1, 'JUSTID')
    else
      ds[#ds + 1] = id
      ds[#ds + 1] = count
      ds[#ds + 1] = m
      got = got + 1
      alone = lastrec ~= nil and n >= 1 and n >= lastrec
    end
  end
  if #taken > 0 then
    remember_reclaimed(KEYS[5], now, taken)
  end
  if #dropped > 0 then
    redis.call('XACK', stream, group, unpack(dropped))
    redis.call('XDEL', stream, unpack(dropped))
    redis.call('ZREM', KEYS[7], unpack(dropped))
  end
  if #poisoned > 0 then
    out[5] = #poisoned
    -- Recorded before the entries go: Redis keeps what a script wrote
    -- before a command of it failed (a discard list of another type).
    local len = 0
    for i = 1, #records do
      local reason = 'conveyor: poison: lease expired ' .. records[i][1] .. ' times'
      len = redis.call('LPUSH', dead, discard_record(now, reason, records[i][2]))
    end
    redis.call('XACK', stream, group, unpack(poisoned))
    redis.call('XDEL', stream, unpack(poisoned))
    discard_retain(discard_list(dead, KEYS[3], KEYS[4], ARGV[7], ARGV[8]), now, len)
  end
  if (#poisoned > 0 or #dropped > 0) and redis.call('XLEN', stream) == 0 then
    redis.call('DEL', KEYS[6])
  end
  group_end_push(group_keys(8), ended, stream, 'stream', group, KEYS[6])
  local vs, admit = collect()
  -- Every entry that ends here gives its slots back; one deleted while
  -- pending too: its message is lost, and its slots would be.
  local gone = {}
  for _, ids in ipairs({deleted, dropped, poisoned}) do
    for i = 1, #ids do
      gone[#gone + 1] = ids[i]
    end
  end
  limit_end(L, gone, admit)
  limit_push(stream, 'stream', group, KEYS[6], vs)
end

if exists and got == 0 then
  local r = redis.call('XREADGROUP', 'GROUP', group, me, 'COUNT', max - got, 'STREAMS', stream, '>')
  if r and r[1] then
    for _, e in ipairs(r[1][2]) do
      ds[#ds + 1] = e[1]
      ds[#ds + 1] = 1
      ds[#ds + 1] = entry_body(e[2])
      got = got + 1
    end
  end
end

local parked, np = {}, 0
if #ds > 0 then
  parked, np = limit_admit(stream, group, KEYS[6], L, limit_config(L), ds)
end
out[2] = np
for i = 1, #ds, 3 do
  if not parked[ds[i]] then
    out[#out + 1] = ds[i]
    out[#out + 1] = ds[i + 1]
    out[#out + 1] = ds[i + 2]
  end
end
return out
