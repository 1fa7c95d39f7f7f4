-- fetch.lua: lease up to ARGV[1] messages of one queue to a consumer.
-- Before popping it promotes due delayed messages to the back of ready and
-- hands messages whose lease ran out back to the front of ready (counting a
-- recovery), both bounded so that one call stays short. Each leased message
-- gets deliveries+1 (its new fencing token), an in-flight entry and a lease.
-- A message whose id is already in flight (a producer reused a live id) is
-- not leased twice: it goes to the discard list, since leasing it would
-- overwrite the other copy's in-flight entry.
--
-- KEYS[1] <prefix>:{<queue>}:ready         LIST of stored messages; LPUSH in, RPOP out
-- KEYS[2] <prefix>:{<queue>}:inflight      HASH id -> stored message being worked on
-- KEYS[3] <prefix>:{<queue>}:lease         ZSET id, score = lease deadline (unix ms)
-- KEYS[4] <prefix>:{<queue>}:delayed       ZSET stored message, score = run-at (unix ms)
-- KEYS[5] <prefix>:{<queue>}:dead          LIST of discard records
-- KEYS[6] <prefix>:{<queue>}:dead_dropped  STRING count of records trimmed off the discard list
-- ARGV[1] max messages to lease, >= 1
-- ARGV[2] visibility timeout, ms
-- ARGV[3] max expired leases to reclaim
-- ARGV[4] max delayed messages to promote
-- ARGV[5] max discard records kept
-- Reply: {deadline (unix ms), hint (ms), v1, ..., vn}: vi are the leased
-- messages, deliveries already incremented. When n is 0, hint is the time
-- until the next delayed message is due or the next lease runs out (-1:
-- neither), so the caller can bound its blocking wait.

local ready, inflight, lease, delayed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local max, vt = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()

-- promote: due delayed messages join the back of ready, earliest first.
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
if #due > 0 then
  bulk('ZREM', delayed, due)
  bulk('LPUSH', ready, due)
end

reclaim(ready, inflight, lease, now, tonumber(ARGV[3]))

local deadline = now + vt
local out = {deadline, -1}
local vs = redis.call('RPOP', ready, max)
if vs then
  local ids, news, nvs = {}, {}, {}
  for i = 1, #vs do
    local nv, id = bump(vs[i])
    if nv then
      ids[#ids + 1] = id
      nvs[#nvs + 1] = nv
    else
      discard(KEYS[5], KEYS[6], tonumber(ARGV[5]), now, 'conveyor: malformed stored message', vs[i])
    end
  end
  local live = hmget(inflight, ids)
  local seen, hset, zadd = {}, {}, {}
  for i = 1, #ids do
    local id = ids[i]
    if live[i] or seen[id] then
      discard(KEYS[5], KEYS[6], tonumber(ARGV[5]), now, 'conveyor: duplicate id in flight', nvs[i])
    else
      seen[id] = true
      hset[#hset + 1] = id
      hset[#hset + 1] = nvs[i]
      zadd[#zadd + 1] = deadline
      zadd[#zadd + 1] = id
      out[#out + 1] = nvs[i]
    end
  end
  bulk('HSET', inflight, hset)
  bulk('ZADD', lease, zadd)
end

if #out == 2 then
  local hint = -1
  local nd = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if nd[2] then
    hint = math.max(0, tonumber(nd[2]) - now)
  end
  local nl = redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')
  if nl[2] then
    local h = math.max(0, tonumber(nl[2]) - now)
    if hint < 0 or h < hint then
      hint = h
    end
  end
  out[2] = hint
end
return out
