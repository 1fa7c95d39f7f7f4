-- lib.lua (internal/inspect): the helper every driver's sizes script ends
-- with. The Go side puts internal/timers' lib.lua (now_ms) and
-- internal/discards' lib.lua (discard_expire, discard_time) in front of it.
--
-- KEYS, ARGV, reply: none of its own; see each script.

-- queue_tail reads the figures both durable drivers keep alike, after one
-- step of the discard list's age retention (so no figure counts a record
-- past the age limit unless the step dropped all it may: the Go side then
-- reads again): {dropped for age by this call, pending timers, discard
-- records, records dropped by the count cap, records dropped for age in
-- all, time of the oldest record (unix ms; -1: none or unreadable),
-- processed, failed, jobs waiting in their FIFO groups' lines (gmsgs, the
-- queue's group_msgs HASH, internal/groups), jobs waiting for a concurrency
-- limit's slot (lwait, the queue's limit_wait ZSET, internal/limits)}.
local function queue_tail(delayed, dead, dropped, expired, stats, maxage, gmsgs, lwait)
  local now_dropped = discard_expire(dead, expired, maxage, now_ms())
  local oldest = -1
  local rec = redis.call('LINDEX', dead, -1)
  if rec then
    oldest = discard_time(rec) or -1
  end
  local c = redis.call('HMGET', stats, 'processed', 'failed')
  return {now_dropped, redis.call('ZCARD', delayed), redis.call('LLEN', dead),
    tonumber(redis.call('GET', dropped) or '0'), tonumber(redis.call('GET', expired) or '0'),
    oldest, tonumber(c[1] or '0'), tonumber(c[2] or '0'), redis.call('HLEN', gmsgs),
    redis.call('ZCARD', lwait)}
end
