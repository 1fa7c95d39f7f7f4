-- show.lua: a queue's concurrency limits with their slots held and jobs
-- waiting, read at one instant.
--
-- KEYS[1..6] the queue's limit keys (lib.lua)
-- Reply: a flat array of quadruples {class, limit (0: none), held,
-- waiting}, one per class that has a limit, a slot held or a job waiting.

local L = limit_keys(1)
local cfg = limit_config(L) or {}
local st = redis.call('HGETALL', L.state)
local cs, seen = {}, {}
for c in pairs(cfg) do
  seen[c] = true
  cs[#cs + 1] = c
end
for i = 1, #st, 2 do
  if not seen[st[i]] then
    seen[st[i]] = true
    cs[#cs + 1] = st[i]
  end
end
local held = limit_states(L, cs)
local out = {}
for i = 1, #cs do
  local c = cs[i]
  local lo, hi = group_line(c)
  out[#out + 1] = c
  out[#out + 1] = cfg[c] or 0
  out[#out + 1] = held[c][1]
  out[#out + 1] = redis.call('ZLEXCOUNT', L.wait, lo, hi)
end
return out
