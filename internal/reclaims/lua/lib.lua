-- lib.lua (internal/reclaims): the record of reclaimed leases, shared by the
-- list and stream drivers' scripts. It needs internal/timers' lib.lua (bulk,
-- keep_recent) in front of it.
--
-- The record is a ZSET <prefix>:{<queue>}:reclaimed, member -> reclaim time
-- (unix ms), one member per lease a reclaim took because it ran out: the
-- list driver's receipt, the stream driver's token "<entry ID>/<delivery
-- count>" of the delivery whose lease ran out. A settle that finds its
-- lease gone reads it: a member here means the lease was taken from the
-- settling worker (LEASE_LOST), none means a settle ended it (GONE), which
-- tells a worker that lost the reply to an earlier settle whether that one
-- landed. Each member is kept for RECLAIMED_AGE ms, at most RECLAIMED_MAX
-- of them: long past the retries of a settle whose reply was lost (the
-- worker pool gives up on an ack within a minute), and small.
--
-- KEYS, ARGV, reply: none of its own; see each script.

local RECLAIMED_AGE = 3600000
local RECLAIMED_MAX = 10000

-- remember_reclaimed adds the members ms (a list) to the record rec, as
-- taken back at now (ms), then trims the record by age and by count, and
-- lets the key expire RECLAIMED_AGE after its last reclaim. Only a
-- reclaim that took something pays for it.
local function remember_reclaimed(rec, now, ms)
  local a, t = {}, tostring(now)
  for i = 1, #ms do
    a[#a + 1] = t
    a[#a + 1] = ms[i]
  end
  bulk('ZADD', rec, a)
  keep_recent(rec, now, RECLAIMED_AGE, RECLAIMED_MAX)
end

-- was_reclaimed reports whether the record rec holds m: a reclaim took that
-- lease.
local function was_reclaimed(rec, m)
  return redis.call('ZSCORE', rec, m) ~= false
end
