-- resign.lua: delete a lease key if, and only if, it still names the
-- candidate that is giving it up, so that a candidate whose lease already
-- passed to another never deletes the other's.
--
-- KEYS[1] the lease key (STRING: the holder's candidate ID, with a TTL)
-- ARGV[1] the candidate's ID
-- Reply: 1 when deleted, 0 when the key named another or was gone.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
