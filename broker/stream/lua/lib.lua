-- lib.lua: helpers shared by the stream driver's scripts that read entries
-- (fetch.lua and the inspection scripts) or settle them (ack.lua,
-- requeue.lua, discard.lua). The Go side puts this text in front of each
-- of them (see scripts.go and inspect.go), so every script
-- still runs as one self-contained EVAL; the helpers are locals, as Redis 7
-- forbids script globals.
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
