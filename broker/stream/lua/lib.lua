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

-- lost_status returns the status of a settle whose entry id is not pending
-- in the group (the caller looked): "GONE" when it is not in the stream
-- either (someone settled it, and no consumer holds it), else "LEASE_LOST".
local function lost_status(stream, id)
  if #redis.call('XRANGE', stream, id, id) == 0 then
    return 'GONE'
  end
  return 'LEASE_LOST'
end
