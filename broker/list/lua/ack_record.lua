-- ack_record.lua: ack.lua for a batch in which some deliveries ask for a
-- record of their finished job (internal/records) or belong to a group
-- (internal/groups): each delivery acked is settled as ack.lua settles it,
-- its record, if it asks for one, is written in the same step, and the
-- next job of its group, if any, joins the back of ready. A delivery that
-- does not settle leaves no record and lets no job in.
--
-- KEYS[1] <prefix>:{<queue>}:lease        ZSET receipt of a delivery in flight, score = lease deadline (unix ms)
-- KEYS[2] <prefix>:{<queue>}:inflight     HASH receipt -> stored message
-- KEYS[3] <prefix>:{<queue>}:stats        HASH processed, failed: cumulative counters
-- KEYS[4] <prefix>:{<queue>}:reclaimed    ZSET receipt of a lease a reclaim took, score = when (unix ms)
-- KEYS[5] <prefix>:{<queue>}:done         HASH job ID -> record
-- KEYS[6] <prefix>:{<queue>}:done_at      ZSET job ID, score = when its record expires (unix ms)
-- KEYS[7] <prefix>:{<queue>}:done_counts  HASH expired, dropped
-- KEYS[8] <prefix>:{<queue>}:ready        LIST of stored messages
-- KEYS[9] <prefix>:{<queue>}:wake         ZSET wake signal, set when a job joins ready
-- KEYS[10..13] the queue's group keys (internal/groups)
-- KEYS[14..19] the queue's limit keys (internal/limits): the deliveries'
--          slots are given back
-- ARGV[1] n, the number of receipts
-- ARGV[2] the cap on the queue's records, >= 1
-- ARGV[3] .. ARGV[n+2] the receipts, delivery k at ARGV[k+2]
-- then for each delivery k: its job ID, keep (ms; 0: no record), record
-- JSON, grouped ("1": its message has a group, else "0"); keep is "0" or
-- a positive count, compared as a string (a number costs a parse)
-- Reply: as ack.lua's, k numbering the receipts.

local n = tonumber(ARGV[1])
local rs = {unpack(ARGV, 3, n + 2)}
local oks, okat, lost = take(KEYS[1], KEYS[2], KEYS[4], rs)
if #oks > 0 then
  redis.call('HINCRBY', KEYS[3], 'processed', #oks)
  local now = now_ms()
  local grouped = {}
  for i = 1, #oks do
    local at = n + 3 + 4 * ((okat and okat[i] or i) - 1)
    if ARGV[at + 1] ~= '0' then
      record_put(KEYS[5], KEYS[6], KEYS[7], now, ARGV[2], ARGV[at], ARGV[at + 1], ARGV[at + 2])
    end
    if ARGV[at + 3] == '1' then
      grouped[#grouped + 1] = ARGV[at]
    end
  end
  local vs, admit = collect()
  group_release(group_keys(10), grouped, admit)
  push_to(KEYS[8], 'list', nil, KEYS[9], vs)
  limit_release(limit_keys(14), KEYS[8], KEYS[9], oks)
end
return lost
